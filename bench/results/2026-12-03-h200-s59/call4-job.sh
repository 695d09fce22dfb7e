#!/usr/bin/env bash
# session 59, call 4: after the second round of fixes (an asynchronous
# error is a communicator's first failure; a NULL window's deregistration;
# the UCX error poll's race; a peer that ended normally: waits for the
# signals it sent and a receive of the message it left are taken; the
# channel and UCX notices split out): test_peer_left three times, the
# whole make check, test_p2p and test_rma under MPS at 2 and 4 ranks, then
# compute-sanitizer (memcheck, memory accesses only) on test_peer_left and
# test_p2p's graph steps, 2 ranks.
out=$1
mkdir -p $out
(autoreconf -fi && ./configure -q && make -j16 && make -j16 check TESTS=) > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
for i in 1 2 3; do
  MPINCCL_TEST_TIMEOUT=120 tests/run-test ./tests/gpu/test_peer_left > $out/peer_left-$i.log 2>&1
  rc=$?
  echo "test_peer_left run $i: exit $rc"
  [ $i = 1 ] || [ $rc != 0 ] && grep -E '^test_peer_left|^\[rank' $out/peer_left-$i.log
  [ $rc = 0 ] && [ $i != 1 ] && rm -f $out/peer_left-$i.log
done
MPINCCL_TEST_TIMEOUT=120 timeout 330 make -j4 check > $out/check.log 2>&1
echo "make check exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(FAIL|ERROR):' $out/check.log
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log tests/gpu/test_gpu_comm.log 2>/dev/null | sort | uniq -c
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
flags=$(tests/run-test --mpirun-flags)
mps_start || exit 1; sleep 1
for np in 2 4; do
  for t in test_p2p test_rma; do
    timeout 60 mpirun -np $np $flags -x CUDA_MPS_PIPE_DIRECTORY ./tests/gpu/$t > $out/mps-$t-$np.log 2>&1
    rc=$?
    echo "MPS $t np=$np: exit $rc; $(grep -E 'failures$' $out/mps-$t-$np.log | tail -1)"
    [ $rc = 0 ] && rm -f $out/mps-$t-$np.log
  done
done
mps_stop
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
ms="$sanitizer --tool memcheck --report-api-errors no --error-exitcode 9"
timeout 100 mpirun -np 2 $flags $ms ./tests/gpu/test_peer_left > $out/memcheck-peer-left.log 2>&1
echo "memcheck test_peer_left: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/memcheck-peer-left.log) ranks with 0 errors; $(grep -cE ' ok$' $out/memcheck-peer-left.log) ok lines"
for step in "graph_replay(" "graph_small(" "graph_halo(" "graph_recapture("; do
  TEST_P2P_ONLY="$step" timeout 60 mpirun -np 2 $flags -x TEST_P2P_ONLY $ms ./tests/gpu/test_p2p > $out/memcheck-p2p.log 2>&1
  echo "memcheck test_p2p $step: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/memcheck-p2p.log) ranks with 0 errors; $(grep 'failures$' $out/memcheck-p2p.log | tail -1)"
done
rm -f $out/build.log
