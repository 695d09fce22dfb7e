#!/usr/bin/env bash
# session 44, call 2 (final source): build; compute-sanitizer racecheck and synccheck on the first
# test_p2p steps (the flag kernel's shared words), memcheck on test_reset and test_gpu_comm,
# then memcheck on the whole of test_p2p at 2 ranks, as far as the time allows.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
san=/usr/local/cuda/bin/compute-sanitizer
command -v compute-sanitizer >/dev/null && san=$(command -v compute-sanitizer)
s() { local tag=$1 lim=$2; shift 2; local t0=$SECONDS
  timeout $lim mpirun -np 2 $flags -x TEST_P2P_ONLY "$san" --report-api-errors no --error-exitcode 9 "$@" > $out/$tag.log 2>&1
  echo "$tag: exit $? in $((SECONDS-t0)) s; $(grep -c 'ERROR SUMMARY: 0 errors' $out/$tag.log) ranks with 0 errors; $(grep -h 'failures$\|Checks' $out/$tag.log | tr '\n' ' ')"
  grep -h 'ERROR SUMMARY\|Race\|Barrier error\|Invalid' $out/$tag.log | sort | uniq -c | head -5; }
export TEST_P2P_ONLY="ring(sizes"
s racecheck 100 --tool racecheck ./tests/gpu/test_p2p
s synccheck 100 --tool synccheck ./tests/gpu/test_p2p
unset TEST_P2P_ONLY; export TEST_P2P_ONLY=
s memcheck-reset 120 --tool memcheck ./tests/gpu/test_reset
s memcheck-comm 60 --tool memcheck ./tests/gpu/test_gpu_comm
s memcheck-p2p 240 --tool memcheck ./tests/gpu/test_p2p
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
