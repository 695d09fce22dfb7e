#!/usr/bin/env bash
# session 36: the clears' barrier only in captured tables.  Build (warm
# machine: incremental), MPS: test_p2p whole at 2, graph steps at 2 4 8,
# test_rma at 2; 8 B sendrecv old (b4fd521) / new, eight interleaved pairs;
# make check.
out=$1
step() { echo "== $(date +%T) $*"; }
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > /dev/null 2>&1
make -j32 > $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
make -j32 check TESTS= > /dev/null 2>&1
[ -x /tmp/old/bench/mpinccl_bench ] || { echo "no old build"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p at 2, graph steps at 4 8, test_rma at 2"
MPINCCL_TEST_NP="2" MPINCCL_MPIRUN_FLAGS="$flags $x" tests/run-test ./tests/gpu/test_p2p > $out/p2p-mps.log 2>&1; echo "p2p exit $?"
TEST_P2P_ONLY=graph MPINCCL_TEST_NP="4 8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-graph-mps.log 2>&1; echo "graph exit $?"
MPINCCL_TEST_NP="2" MPINCCL_MPIRUN_FLAGS="$flags $x" tests/run-test ./tests/gpu/test_rma > $out/rma-mps.log 2>&1; echo "rma exit $?"
step "8 B sendrecv"
for k in 1 2 3 4 5 6 7 8; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    line=$(timeout 60 mpirun -np 2 $flags $x $b -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   $v 8B $k: ${line:-failed}" | tee -a $out/ab3.txt
  done
done
echo quit | nvidia-cuda-mps-control; sleep 1
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
step done
