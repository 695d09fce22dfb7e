#!/usr/bin/env bash
# session 42: test_reset (communicators made again after cudaDeviceReset) at 1, 2, 4; under MPS at 2.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
for np in 1 2 4; do
  MPINCCL_TEST_TIMEOUT=90 MPINCCL_TEST_NP=$np NCCL_DEBUG=WARN tests/run-test ./tests/gpu/test_reset > $out/reset-np$np.log 2>&1; echo "np$np exit $?"; grep -v '^$' $out/reset-np$np.log | head -30
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
MPINCCL_TEST_TIMEOUT=90 MPINCCL_TEST_NP=2 MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/test_reset > $out/reset-mps.log 2>&1; echo "MPS np2 exit $?"; head -30 $out/reset-mps.log
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
