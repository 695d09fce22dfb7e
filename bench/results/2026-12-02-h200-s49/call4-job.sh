#!/usr/bin/env bash
# session 49, call 4 (same machine as call 3, built): the sanitizer further.
# memcheck on test_p2p at 2 ranks without the steps run-device.sh names as
# false reports (a freed buffer's handle reused: sender_gone_loop,
# graph_small, graph_recapture) and the threads; test_rma at 4 ranks;
# racecheck and synccheck on the whole of test_p2p at 1 rank; initcheck on
# test_p2p's ring steps at 2 ranks and test_rma's pingpong and barrier.
out=$1
mkdir -p $out
flags=$(tests/run-test --mpirun-flags)
cs="./libtool --mode=execute compute-sanitizer --report-api-errors no --error-exitcode 9"
summary() { # name exit: the sanitizer's summaries and the test's; the log cut to its first and last 200 lines
  echo "$1: exit $2; $(grep -h 'SUMMARY' $out/$1.log | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  grep -h 'failures$' $out/$1.log | head -2
  { head -200 $out/$1.log; echo ...; tail -200 $out/$1.log; } > $out/$1.cut && mv $out/$1.cut $out/$1.log
}
skip=threads,sender_gone_loop,graph_small,graph_recapture
timeout 200 mpirun -np 2 $flags -x TEST_P2P_SKIP=$skip $cs --tool memcheck ./tests/gpu/test_p2p > $out/p2p2-memcheck.log 2>&1
summary p2p2-memcheck $?
timeout 120 mpirun -np 4 $flags -x TEST_RMA_SKIP=threads $cs --tool memcheck ./tests/gpu/test_rma > $out/rma4-memcheck.log 2>&1
summary rma4-memcheck $?
for tool in racecheck synccheck; do
  timeout 100 mpirun -np 1 $flags -x TEST_P2P_SKIP=threads $cs --tool $tool ./tests/gpu/test_p2p > $out/p2p1-all-$tool.log 2>&1
  summary p2p1-all-$tool $?
done
timeout 60 mpirun -np 2 $flags -x TEST_P2P_ONLY="ring(sizes" $cs --tool initcheck ./tests/gpu/test_p2p > $out/p2p2-initcheck.log 2>&1
summary p2p2-initcheck $?
for s in "pingpong(8)" "barrier()"; do
  timeout 60 mpirun -np 2 $flags -x TEST_RMA_ONLY="$s" $cs --tool initcheck ./tests/gpu/test_rma > "$out/rma2-initcheck-${s%%(*}.log" 2>&1
  summary "rma2-initcheck-${s%%(*}" $?
done
