#!/usr/bin/env bash
# session 38 call 5: captured launches with few or many peers, graph slots'
# inbox (MPINCCL_EAGER_GRAPH=1) against two hops (0), MPS, interleaved.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q && make -j16) > $out/build.log 2>&1 || { tail $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for k in 1 2 3; do for g in 1 0; do
  for cfg in "8 alltoall 4K 20" "8 alltoall 64 20" "4 halo 4K 8" "4 halo 64K 8" "2 halo 4K 4" "3 sendrecv 8 20" "8 sendrecv 8 20"; do
    set -- $cfg
    line=$(MPINCCL_EAGER_GRAPH=$g timeout 60 mpirun -np $1 $flags -x CUDA_MPS_PIPE_DIRECTORY -x MPINCCL_EAGER_GRAPH ./bench/mpinccl_bench -o $2 -b $3 -e $3 -n $4 -w 5 -G 1 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ |rror' | head -n 1)
    echo "   graph-inbox=$g np=$1 $2 $3 n=$4 round $k: ${line:-failed}" | tee -a $out/peers.txt
  done
done; done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
