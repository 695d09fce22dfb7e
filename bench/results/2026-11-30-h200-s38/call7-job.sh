#!/usr/bin/env bash
# session 38 call 7: captured launches under MPS with MPINCCL_EAGER_GRAPH at
# its default (8: by the launch's count), 0 (two hops) and 1 (every one
# through the graph slots' inbox), interleaved, two rounds.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q && make -j16) > $out/build.log 2>&1 || { tail $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for k in 1 2; do for g in 8 0 1; do
  for cfg in "2 sendrecv 8" "4 alltoall 4K" "8 alltoall 4K" "8 halo 64K"; do
    set -- $cfg
    line=$(MPINCCL_EAGER_GRAPH=$g timeout 60 mpirun -np $1 $flags -x CUDA_MPS_PIPE_DIRECTORY -x MPINCCL_EAGER_GRAPH ./bench/mpinccl_bench -o $2 -b $3 -e $3 -n 20 -w 5 -G 1 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ |rror' | head -n 1)
    echo "   EAGER_GRAPH=$g np=$1 $2 $3 round $k: ${line:-failed}" | tee -a $out/default.txt
  done
done; done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
