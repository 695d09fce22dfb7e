#!/usr/bin/env bash
# session 36 call 3: what a captured halo's time is made of (new build, MPS):
# ranks 2 4 8, faces 4K and 64K, kernels (default) against memory operations
# only (MPINCCL_KERNEL_SYNC=0), captured and not
out=$1
step() { echo "== $(date +%T) $*"; }
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > /dev/null 2>&1; make -j32 > /dev/null 2>&1 || { echo "build failed"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY -x MPINCCL_KERNEL_SYNC"
for k in 1 2; do
for np in 2 4 8; do
  for ks in 4194304 0; do
    for g in 1 0; do
      for f in 4K 64K; do
        line=$(MPINCCL_KERNEL_SYNC=$ks timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench -o halo -b $f -e $f -n 20 -G $g -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | head -1)
        echo "np=$np ks=$ks G=$g f=$f: ${line:-failed}" | tee -a $out/diag.txt
      done
    done
  done
done
done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
