#!/usr/bin/env bash
# session 49, call 1: HEAD b4c4943 (session 48's last refactor, not yet run on the GPU):
# build, make check, test_p2p and test_rma under MPS at 2 and 4, the put ping-pong over UCX.
out=$1
mkdir -p $out
[ -f Makefile ] && grep -q test_fault_remote Makefile || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'test_fault_remote:' tests/gpu/launch_fault_remote.sh.log | tail -1
grep -h 'failures$' tests/gpu/test_p2p_ucx.sh.log tests/gpu/test_rma_ucx.sh.log | sort | uniq -c
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for np in 2 4; do
  for t in test_p2p test_rma; do
    MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=200 MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
      tests/run-test tests/gpu/$t > $out/mps-$t-$np.log 2>&1
    echo "MPS $t np=$np rc=$? :: $(grep -h 'failures$' $out/mps-$t-$np.log | tr '\n' ' ')"
  done
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
# the put+signal ping-pong over UCX at 8 B (the flush before each signal), against UCX's own put latency (--net)
MPINCCL_TRANSPORT=ucx timeout 90 mpirun -np 2 $flags -x MPINCCL_TRANSPORT ./bench/mpinccl_bench -o putpingpong -b 8 -e 64K -f 8 -n 200 -w 20 --net > $out/putpingpong-ucx.txt 2>&1
echo "putpingpong over UCX exit $?"; tail -n 8 $out/putpingpong-ucx.txt
