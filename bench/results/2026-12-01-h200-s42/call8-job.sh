#!/usr/bin/env bash
# session 42, call 8 (final source): build; make check; under MPS test_p2p with memory operations only at 2 and 4
# (graph_pool_stage's fix) and test_reset at 2.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
MPINCCL_KERNEL_SYNC=0 MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY -x MPINCCL_KERNEL_SYNC" tests/run-test ./tests/gpu/test_p2p > $out/p2p-mps-memops.log 2>&1; echo "test_p2p MPS memops 2 4: exit $? :: $(grep -h 'failures$\|pool stages held' $out/p2p-mps-memops.log | tr '\n' ' ')"
MPINCCL_TEST_NP="2" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/test_reset > $out/reset-mps.log 2>&1; echo "test_reset MPS 2: exit $? :: $(grep -h 'failures$' $out/reset-mps.log)"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
