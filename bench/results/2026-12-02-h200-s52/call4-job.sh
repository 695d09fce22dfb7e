#!/usr/bin/env bash
# session 52, call 4 (a fresh machine): under MPS, is call 3's hang of
# threads_late_second_side run alone (hand-back removed) the fallback's
# known hazard or the removal's?  The step alone with the hand-back; then,
# with it removed, the thread steps as test_p2p_threads.sh runs them
# (threads_ring first, as in call 3's passing run): must fail, not hang.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
mf="$flags -x CUDA_MPS_PIPE_DIRECTORY"
TEST_P2P_ONLY=threads_late MPINCCL_TEST_NP=1 MPINCCL_TEST_TIMEOUT=60 MPINCCL_MPIRUN_FLAGS="$mf -x TEST_P2P_ONLY" stdbuf -oL tests/run-test tests/gpu/test_p2p > $out/mps-alone-fixed.log 2>&1
echo "alone, with the hand-back: rc=$?"; grep -h 'threads_late_second_side:\|failures$\|timed out' $out/mps-alone-fixed.log | head -4
sed -i 's/if (was == (p->seq | DONE_GIVEN_UP)) mpn_event_put(dev, ev);/(void)was;/' src/p2p/issue.c
echo "hand-back removed: $(grep -c '(void)was;' src/p2p/issue.c)"
make -j16 check TESTS= > $out/nofix-build.log 2>&1 || tail -5 $out/nofix-build.log
MPINCCL_TEST_NP=1 MPINCCL_TEST_TIMEOUT=90 MPINCCL_MPIRUN_FLAGS="$mf" tests/run-test tests/gpu/test_p2p_threads.sh > $out/mps-threads-nofix.log 2>&1
echo "thread steps, without the hand-back: rc=$? (expected 1)"; grep -h 'threads_late_second_side:\|expected\|failures$\|timed out' $out/mps-threads-nofix.log | head -6
sed -i 's/(void)was;/if (was == (p->seq | DONE_GIVEN_UP)) mpn_event_put(dev, ev);/' src/p2p/issue.c
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
rm -f $out/*build.log $out/configure.log
