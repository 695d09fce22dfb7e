#!/usr/bin/env bash
# session 36 call 1: captured kernels of several blocks.  Build new and old
# (b4fd521), make check, MPS: test_p2p graph steps at 2 4 8 (with a trace
# of the kernels' blocks), owed buffer steps, test_rma graph steps; A/B of
# captured halo and sendrecv, old against new, interleaved.
out=$1
step() { echo "== $(date +%T) $*"; }
step "build new"; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
make -j32 check TESTS= > /dev/null 2>&1
step "build old"; rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp
(cd /tmp/old && autoreconf -fi && ./configure -q && make -j32) > $out/build-old.log 2>&1 || { tail -20 $out/build-old.log; exit 1; }
ls /tmp/old/bench/mpinccl_bench || exit 1
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p graph steps at 2 4 8"
TEST_P2P_ONLY=graph MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-graph-mps.log 2>&1; echo "exit $?"
grep -E "failures|np=.*(PASS|FAIL)|wrong" $out/p2p-graph-mps.log | head -20
step "MPS: graph_halo at 8 with a trace of the kernels"
TEST_P2P_ONLY=graph_halo NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=P2P timeout 120 mpirun -np 8 $flags $x -x TEST_P2P_ONLY -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS ./tests/gpu/test_p2p > $out/trace.log 2>&1; echo "exit $?"
grep -o "flag kernel of [0-9]* flags, [0-9]* copies, [0-9]* blocks" $out/trace.log | sort | uniq -c | sort -rn | head -8
grep -E "failures" $out/trace.log | head -3
step "MPS: test_p2p short/other_memory at 2 4 (owed), test_rma graph at 2 4"
TEST_P2P_ONLY=short MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-short-mps.log 2>&1; echo "short exit $?"
TEST_P2P_ONLY=other_memory MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p >> $out/p2p-short-mps.log 2>&1; echo "other_memory exit $?"
TEST_RMA_ONLY=graph MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_RMA_ONLY" tests/run-test ./tests/gpu/test_rma > $out/rma-graph-mps.log 2>&1; echo "rma graph exit $?"
for k in 1 2; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    step "MPS $v run $k"
    timeout 60 mpirun -np 2 $flags $x $b -o sendrecv -b 8 -e 4M -f 8 -n 200 -w 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v sendrecv-G /" | tee -a $out/ab-graph.txt
    for f in 64K 16K 4K; do
      timeout 60 mpirun -np 8 $flags $x $b -o halo -b $f -e $f -n 50 -w 5 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v halo-G /" | tee -a $out/ab-graph.txt
    done
    timeout 60 mpirun -np 4 $flags $x $b -o alltoall -b 64K -e 1M -f 4 -n 50 -w 5 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v a2a-G /" | tee -a $out/ab-graph.txt
  done
done
for f in 64K 16K; do
  timeout 60 mpirun -np 8 $flags $x ./bench/mpinccl_bench -o halo -b $f -e $f -n 50 -w 5 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/new halo /" | tee -a $out/ab-graph.txt
done
echo quit | nvidia-cuda-mps-control; sleep 1
step "make check (new)"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
step done
