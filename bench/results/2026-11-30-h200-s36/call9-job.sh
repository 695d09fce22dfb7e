#!/usr/bin/env bash
# session 36: old (b4fd521) against the final source under MPS: the 8-rank
# halo (64 KiB faces, not captured) and 8 B sendrecv, interleaved pairs
out=$1
[ -x /tmp/old/bench/mpinccl_bench ] && [ -x bench/mpinccl_bench ] || { echo "builds missing"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
for k in 1 2 3 4 5 6; do
  for v in new old; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    line=$(timeout 60 mpirun -np 8 $flags $x $b -o halo -b 64K -e 64K -n 50 -w 10 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   $v halo $k: ${line:-failed}" | tee -a $out/ab2.txt
    line=$(timeout 60 mpirun -np 2 $flags $x $b -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   $v 8B $k: ${line:-failed}" | tee -a $out/ab2.txt
  done
done
echo quit | nvidia-cuda-mps-control; sleep 1
