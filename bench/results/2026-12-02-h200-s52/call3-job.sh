#!/usr/bin/env bash
# session 52, call 3 (a fresh machine): build; the fixed threads_late_second_side
# without MPS; under MPS test_p2p's thread steps at 1 and 2 (with
# threads_late_second_side), that step again with the event hand-back of
# issue.c turned off (it must fail), test_p2p and test_rma at 2 and 4; ten
# jobs of the 8 B sendrecv under MPS.
out=$1
mkdir -p $out
echo "source: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git here')"
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
TEST_P2P_ONLY=threads_late MPINCCL_TEST_NP="1 2" MPINCCL_TEST_TIMEOUT=120 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" tests/run-test tests/gpu/test_p2p > $out/nomps-late.log 2>&1
echo "no MPS threads_late rc=$?"; grep -h 'threads_late_second_side:\|failures$' $out/nomps-late.log | sort | uniq -c
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
mf="$flags -x CUDA_MPS_PIPE_DIRECTORY"
MPINCCL_TEST_NP="1 2" MPINCCL_TEST_TIMEOUT=120 MPINCCL_MPIRUN_FLAGS="$mf" tests/run-test tests/gpu/test_p2p_threads.sh > $out/mps-threads.log 2>&1
echo "MPS test_p2p_threads rc=$?"; grep -h 'threads_late_second_side:\|failures$' $out/mps-threads.log | sort | uniq -c
# the same step without the hand-back: must fail (events left handed out)
sed -i 's/if (was == (p->seq | DONE_GIVEN_UP)) mpn_event_put(dev, ev);/(void)was;/' src/p2p/issue.c
echo "hand-back removed: $(grep -c '(void)was;' src/p2p/issue.c)"
make -j16 check TESTS= > $out/nofix-build.log 2>&1 || tail -5 $out/nofix-build.log
TEST_P2P_ONLY=threads_late MPINCCL_TEST_NP="1 2" MPINCCL_TEST_TIMEOUT=120 MPINCCL_MPIRUN_FLAGS="$mf -x TEST_P2P_ONLY" tests/run-test tests/gpu/test_p2p > $out/mps-nofix.log 2>&1
echo "without the hand-back rc=$? (expected non-zero)"; grep -h 'threads_late_second_side:\|failures$' $out/mps-nofix.log | sort | uniq -c | head
sed -i 's/(void)was;/if (was == (p->seq | DONE_GIVEN_UP)) mpn_event_put(dev, ev);/' src/p2p/issue.c
make -j16 check TESTS= > $out/fix-build.log 2>&1 || tail -5 $out/fix-build.log
echo "hand-back back: $(grep -c 'DONE_GIVEN_UP)) mpn_event_put' src/p2p/issue.c)"
for np in 2 4; do
  for t in test_p2p test_rma; do
    MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=150 MPINCCL_MPIRUN_FLAGS="$mf" tests/run-test tests/gpu/$t > $out/mps-$t-$np.log 2>&1
    echo "MPS $t np=$np rc=$? :: $(grep -h 'failures$' $out/mps-$t-$np.log | tr '\n' ' ')"
    grep -hE 'expected' $out/mps-$t-$np.log | head -3
  done
done
for k in 1 2 3 4 5 6 7 8 9 10; do
  line=$(timeout 40 mpirun -np 2 $mf ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
  echo "   MPS sendrecv-8B job $k: ${line:-failed}"
done | tee $out/mps-8B-ten.txt
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
rm -f $out/mps-test_*.log $out/*build.log $out/configure.log
