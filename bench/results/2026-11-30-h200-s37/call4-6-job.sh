#!/usr/bin/env bash
# session 37 call 4: why a captured halo is slow.  Under MPS, 8 and 4
# ranks, 64 KiB and 4 KiB faces: not captured (inbox on), not captured with
# the inbox off (every message two hops, as captured ones are), captured.
out=$1
[ -x bench/mpinccl_bench ] || { (autoreconf -fi && ./configure -q && make -j32) > $out/build.log 2>&1 || { tail $out/build.log; exit 1; }; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
for k in 1 2; do
  for np in 8 4; do for face in 64K 4K; do
    for mode in ${MODES:-inbox noinbox graph graphnoinbox}; do
      e=""; g=""; unset MPINCCL_EAGER_MAX MPINCCL_EAGER_BIG_MAX
      case $mode in noinbox|graphnoinbox) e="-x MPINCCL_EAGER_MAX=0 -x MPINCCL_EAGER_BIG_MAX=0"; export MPINCCL_EAGER_MAX=0 MPINCCL_EAGER_BIG_MAX=0;; esac
      case $mode in graph*) g="-G 1";; esac
      line=$(timeout 60 mpirun -np $np $flags $x $e ./bench/mpinccl_bench -o halo -b $face -e $face -n 20 -w 5 $g 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
      echo "   np=$np face=$face $mode round $k: ${line:-failed}" | tee -a $out/diag.txt
    done
  done; done
done
echo quit | nvidia-cuda-mps-control; sleep 1
