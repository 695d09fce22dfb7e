#!/usr/bin/env bash
# session 40, two GPUs: messages of no bytes between GPUs.  test_p2p whole
# at 2 (one process per GPU) and 4 (two per GPU); empty_messages and
# mismatch over UCX at 2; test_rma at 2; MPS: test_p2p at 4.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning: $out/build.log)"; nvidia-smi -L
flags=$(tests/run-test --mpirun-flags)
for np in 2 4; do
  step "test_p2p np=$np whole, two GPUs"
  MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=150 tests/run-test ./tests/gpu/test_p2p > $out/p2p-np$np.log 2>&1
  echo "exit $? :: $(grep -h 'failures$' $out/p2p-np$np.log)"; grep -h 'empty_messages\|expected' $out/p2p-np$np.log | head -5
done
step "over UCX: empty_messages, mismatch, graph_small at 2"
for s in empty_messages mismatch graph_small; do
  MPINCCL_TRANSPORT=ucx TEST_P2P_ONLY=$s MPINCCL_TEST_NP=2 tests/run-test ./tests/gpu/test_p2p > $out/ucx-$s.log 2>&1; echo "   $s: exit $? :: $(grep -h 'failures$' $out/ucx-$s.log)"
done
step "test_rma np=2 whole"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=100 tests/run-test ./tests/gpu/test_rma > $out/rma-np2.log 2>&1; echo "exit $? :: $(grep -h 'failures$' $out/rma-np2.log)"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS: test_p2p np=4 whole, two GPUs"
MPINCCL_TEST_NP=4 MPINCCL_TEST_TIMEOUT=150 MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-mps-np4.log 2>&1
echo "exit $? :: $(grep -h 'failures$' $out/p2p-mps-np4.log)"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
step done
