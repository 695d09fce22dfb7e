#!/usr/bin/env bash
# session 35: captured messages, old (150d52b) against new, under MPS
out=$1
step() { echo "== $(date +%T) $*"; }
here=$(pwd)
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
grep -E "failures|np=.*(PASS|FAIL)" $out/p2p-graph-mps.log
for k in 1 2; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    step "MPS $v run $k: graph sendrecv, graph halo (8 ranks), halo"
    timeout 60 mpirun -np 2 $flags $x $b -o sendrecv -b 8 -e 256K -f 8 -n 200 -w 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v sendrecv-G /" | tee -a $out/ab-graph.txt
    timeout 60 mpirun -np 8 $flags $x $b -o halo -b 64K -e 64K -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v halo-G /" | tee -a $out/ab-graph.txt
    timeout 60 mpirun -np 8 $flags $x $b -o halo -b 4K -e 4K -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/$v halo4K-G /" | tee -a $out/ab-graph.txt
  done
done
timeout 60 mpirun -np 8 $flags $x ./bench/mpinccl_bench -o halo -b 64K -e 64K -n 20 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/new halo /" | tee -a $out/ab-graph.txt
echo quit | nvidia-cuda-mps-control; sleep 1
step "make check (new)"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
step done
