#!/usr/bin/env bash
# session 49, call 3: compute-sanitizer beyond run-device.sh's one pass
# (memcheck on test_p2p's first steps at 2 ranks): memcheck on the whole of
# test_rma at 2 ranks, on test_p2p at 1 rank (a rank to itself, and the
# threads of one process), on examples/halo3d at 2 ranks (send/receive and
# --put) and examples/ring (ranks of one process); racecheck and synccheck
# on test_p2p's ring steps at 1 rank (the copy kernels' shared memory and
# barriers).  Steps with threads are skipped under the sanitizer (threads_ring
# hangs under it, run-device.sh).
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; } # (the tests too, none run)
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
# (the tests are libtool wrappers until make check ran them: execute mode runs the real program)
cs="./libtool --mode=execute compute-sanitizer --report-api-errors no --error-exitcode 9"
summary() { # name exit: the sanitizer's summaries and the test's; the log cut to its first and last 200 lines
  echo "$1: exit $2; $(grep -h 'ERROR SUMMARY' $out/$1.log | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
  grep -h 'failures$' $out/$1.log | head -2
  { head -200 $out/$1.log; echo ...; tail -200 $out/$1.log; } > $out/$1.cut && mv $out/$1.cut $out/$1.log
}
timeout 180 mpirun -np 2 $flags -x TEST_RMA_SKIP=threads $cs --tool memcheck ./tests/gpu/test_rma > $out/rma-memcheck.log 2>&1
summary rma-memcheck $?
timeout 100 mpirun -np 1 $flags -x TEST_P2P_SKIP=threads $cs --tool memcheck ./tests/gpu/test_p2p > $out/p2p1-memcheck.log 2>&1
summary p2p1-memcheck $?
for mode in exchange --put; do
  timeout 40 mpirun -np 2 $flags $cs --tool memcheck ./examples/halo3d -n 64 -i 5 -w 1 ${mode#exchange} > $out/halo3d$mode-memcheck.log 2>&1
  summary halo3d$mode-memcheck $?; grep -h 'check' $out/halo3d$mode-memcheck.log | head -1
done
timeout 25 $cs --tool memcheck ./examples/ring -r 2 -c 4096 -i 5 > $out/ring-memcheck.log 2>&1
summary ring-memcheck $?; grep -h check $out/ring-memcheck.log | head -1
for tool in racecheck synccheck; do
  timeout 45 mpirun -np 1 $flags -x TEST_P2P_ONLY="ring(sizes" $cs --tool $tool ./tests/gpu/test_p2p > $out/p2p1-$tool.log 2>&1
  summary p2p1-$tool $?
done
