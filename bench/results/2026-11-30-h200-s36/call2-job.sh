#!/usr/bin/env bash
# session 36 call 2: captured 8-rank halo, old (b4fd521, /tmp/old) against new, MPS, interleaved
out=$1
step() { echo "== $(date +%T) $*"; }
[ -x /tmp/old/bench/mpinccl_bench ] || { echo "no old build"; exit 1; }
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > /dev/null 2>&1; make -j32 > /dev/null 2>&1 || { echo "build failed"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
for k in 1 2 3; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    step "MPS $v run $k"
    for f in 64K 16K 4K; do
      timeout 60 mpirun -np 8 $flags $x $b -o halo -b $f -e $f -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ |rror|refused" | head -3 | sed "s/^/$v halo-G /" | tee -a $out/ab-halo.txt
    done
  done
done
for f in 64K 16K 4K; do
  timeout 60 mpirun -np 8 $flags $x ./bench/mpinccl_bench -o halo -b $f -e $f -n 20 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/new halo /" | tee -a $out/ab-halo.txt
done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
