#!/usr/bin/env bash
# session 44, call 6: build; run-device.sh's new sanitizer step (memcheck on test_p2p at 2 ranks with
# TEST_P2P_SKIP), and test_rma under memcheck at 2.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$SECONDS
TEST_P2P_SKIP="threads_ring,sender_gone_loop" timeout 240 mpirun -np 2 $flags -x TEST_P2P_SKIP \
  "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/test_p2p > $out/sanitizer.log 2>&1
echo "test_p2p memcheck: exit $? in $((SECONDS-t0)) s; $(grep -c 'ERROR SUMMARY: 0 errors' $out/sanitizer.log) ranks with 0 errors; $(grep -c ' done (0 failures' $out/sanitizer.log) steps done; $(grep -h 'failures$' $out/sanitizer.log | tr '\n' ' ')"
grep -c 'threads_ring\|sender_gone_loop' $out/sanitizer.log
t0=$SECONDS
timeout 200 mpirun -np 2 $flags "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/test_rma > $out/rma-sanitizer.log 2>&1
echo "test_rma memcheck: exit $? in $((SECONDS-t0)) s; $(grep -c 'ERROR SUMMARY: 0 errors' $out/rma-sanitizer.log) ranks with 0 errors; $(grep -h 'failures$' $out/rma-sanitizer.log | tr '\n' ' ')"
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
