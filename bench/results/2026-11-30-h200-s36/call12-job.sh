#!/usr/bin/env bash
# session 36 last call: the self_other refactor.  MPS: test_p2p whole at 1
# and 4, graph steps at 8; no MPS: test_p2p at 1; then make check.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
make -j32 check TESTS= > /dev/null 2>&1
echo "warnings: $(grep -c warning $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p at 1 4, graph steps at 8"
MPINCCL_TEST_NP="1 4" MPINCCL_MPIRUN_FLAGS="$flags $x" tests/run-test ./tests/gpu/test_p2p > $out/p2p-mps.log 2>&1; echo "exit $?"
grep -E "run-test: np=.*(PASS|FAIL)" $out/p2p-mps.log
TEST_P2P_ONLY=graph MPINCCL_TEST_NP="8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-graph8.log 2>&1; echo "graph exit $?"
echo quit | nvidia-cuda-mps-control; sleep 1
step "no MPS: test_p2p at 1"
MPINCCL_TEST_NP="1" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np1.log 2>&1; echo "exit $?"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
step done
