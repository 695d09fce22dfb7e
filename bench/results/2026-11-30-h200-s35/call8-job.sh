#!/usr/bin/env bash
# session 35, last call: the final source: captured launches' kernel bound (many copies) against 64 KiB only; make check
out=$1
step() { echo "== $(date +%T) $*"; }
step "copy the tree, scratch with the 64 KiB bound only"; rm -rf /tmp/small; mkdir -p /tmp/small
cp -r $(ls -A | grep -v -E "^\.device$|^\.git$") /tmp/small/
sed -i 's/#define GRAPH_KERNEL_MANY 8/#define GRAPH_KERNEL_MANY 1000000/' /tmp/small/src/p2p/issue.c
grep -n "define GRAPH_KERNEL_MANY" /tmp/small/src/p2p/issue.c
step "build"; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
make -j32 check TESTS= > /dev/null 2>&1
(cd /tmp/small && autoreconf -fi && ./configure -q && make -j32) > $out/build-small.log 2>&1 || { tail -20 $out/build-small.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p graph and halo steps at 2 4 8; test_rma graph steps at 2 4"
TEST_P2P_ONLY=graph MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-graph-mps.log 2>&1; echo "exit $?"
grep -E "failures|np=.*(PASS|FAIL)" $out/p2p-graph-mps.log
TEST_P2P_ONLY=halo26 MPINCCL_TEST_NP="8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-halo-mps.log 2>&1; echo "exit $?"
grep -E "failures|np=.*(PASS|FAIL)" $out/p2p-halo-mps.log
TEST_RMA_ONLY=graph MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_RMA_ONLY" tests/run-test ./tests/gpu/test_rma > $out/rma-graph-mps.log 2>&1; echo "exit $?"
grep -E "failures|np=.*(PASS|FAIL)" $out/rma-graph-mps.log
for k in 1 2; do
  for v in final 64K; do
    b=./bench/mpinccl_bench; [ $v = 64K ] && b=/tmp/small/bench/mpinccl_bench
    timeout 60 mpirun -np 8 $flags $x $b -o halo -b 16K -e 16K -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v halo16K-G /" | tee -a $out/last.txt
    timeout 60 mpirun -np 8 $flags $x $b -o halo -b 4K -e 4K -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v halo4K-G /" | tee -a $out/last.txt
    timeout 60 mpirun -np 2 $flags $x $b -o sendrecv -b 8 -e 1M -f 8 -n 100 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v sendrecv-G /" | tee -a $out/last.txt
  done
done
echo quit | nvidia-cuda-mps-control; sleep 1
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
step done
