#!/usr/bin/env bash
# session 44, call 7: graph_recapture's invalid writes under memcheck (after the earlier test_p2p steps):
# the imports' history, NCCL_DEBUG=TRACE for IPC.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
flags=$(tests/run-test --mpirun-flags)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=IPC TEST_P2P_SKIP="threads_ring,sender_gone_loop" timeout 200 mpirun -np 2 $flags -x TEST_P2P_SKIP -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS \
  "$sanitizer" --tool memcheck --print-limit 2 --report-api-errors no --error-exitcode 9 ./tests/gpu/test_p2p > $out/trace.log 2>&1
echo "exit $?; $(grep -c 'Invalid' $out/trace.log) invalid; $(wc -l < $out/trace.log) lines"
grep -h 'Access to' $out/trace.log | head -3
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
