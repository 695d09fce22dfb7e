#!/usr/bin/env bash
# session 37 call 7: per-half kernels, scratch switch MPINCCL_SCRATCH_HALFGRID:
# 0 one block unless captured (bfe6d61), 1 several beyond one block's
# bound (f9159ed), 2 as many as the copies call for.  Under MPS, interleaved.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; [ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
for k in 1 2 3; do
  for cfg in "8 64K" "8 16K" "8 4K" "4 64K" "4 256K"; do
    set -- $cfg
    for v in 0 1 2; do
      line=$(timeout 60 mpirun -np $1 $flags $x -x MPINCCL_SCRATCH_HALFGRID=$v ./bench/mpinccl_bench -o halo -b $2 -e $2 -n 50 -w 10 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
      echo "   np=$1 face=$2 v$v round $k: ${line:-failed}" | tee -a $out/half.txt
    done
  done
done
step "halo3d 4 ranks, v1 / v2"
for v in 1 2 1 2; do
  l=$(timeout 60 mpirun -np 4 $flags $x -x MPINCCL_SCRATCH_HALFGRID=$v ./examples/halo3d 2>&1 | grep "time/iter")
  echo "   v$v: $l" | tee -a $out/half.txt
done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
