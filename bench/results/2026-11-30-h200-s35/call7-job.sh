#!/usr/bin/env bash
# session 35 scratch: captured halo with the graph kernel's copy bound at 64 KiB (HEAD) and at 4 MiB (a scratch copy)
out=$1
step() { echo "== $(date +%T) $*"; }
step "copy the tree (before any build) and set the scratch bound"; rm -rf /tmp/big; mkdir -p /tmp/big
make distclean > /dev/null 2>&1; cp -r $(ls -A | grep -v -E "^\.device$|^\.git$") /tmp/big/
sed -i 's/#define GRAPH_KERNEL_BYTES ((size_t)65536)/#define GRAPH_KERNEL_BYTES ((size_t)4194304)/' /tmp/big/src/p2p/issue.c
grep -n "define GRAPH_KERNEL_BYTES" /tmp/big/src/p2p/issue.c
step "build HEAD"; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
step "build the scratch copy"
(cd /tmp/big && autoreconf -fi && ./configure -q && make -j32 && make -j32 check TESTS=) > $out/build-big.log 2>&1 || { tail -20 $out/build-big.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
for k in 1 2; do
  for v in 64K 4M; do
    b=./bench/mpinccl_bench; [ $v = 4M ] && b=/tmp/big/bench/mpinccl_bench
    timeout 60 mpirun -np 8 $flags $x $b -o halo -b 64K -e 64K -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v halo-G /" | tee -a $out/cap.txt
    timeout 60 mpirun -np 8 $flags $x $b -o halo -b 16K -e 16K -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v halo16K-G /" | tee -a $out/cap.txt
    timeout 60 mpirun -np 2 $flags $x $b -o sendrecv -b 128K -e 1M -f 2 -n 100 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v sendrecv-G /" | tee -a $out/cap.txt
    timeout 60 mpirun -np 4 $flags $x $b -o alltoall -b 64K -e 1M -f 4 -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v alltoall-G /" | tee -a $out/cap.txt
  done
done
TEST_P2P_ONLY=graph MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test /tmp/big/tests/gpu/test_p2p > $out/p2p-graph-big.log 2>&1; echo "scratch test_p2p graph steps: exit $?"
echo quit | nvidia-cuda-mps-control; sleep 1
step done
