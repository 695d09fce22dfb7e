#!/usr/bin/env bash
# session 36 call 4: the captured halo's fixed cost: iterations per graph,
# a ring at 4 ranks, and a trace of what a captured halo issues
out=$1
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > /dev/null 2>&1; make -j32 > /dev/null 2>&1 || { echo "build failed"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
r() { line=$(timeout 60 mpirun $flags $x "$@" 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | head -1); echo "$*: ${line:-failed}" | tee -a $out/diag2.txt; }
for n in 1 2 5 20; do r -np 4 ./bench/mpinccl_bench -o halo -b 4K -e 4K -n $n -w 2 -G 1; done
for n in 1 20; do r -np 4 ./bench/mpinccl_bench -o halo -b 4K -e 4K -n $n -w 2 -G 0; done
r -np 4 ./bench/mpinccl_bench -o sendrecv -b 4K -e 4K -n 20 -w 2 -G 1
r -np 8 ./bench/mpinccl_bench -o sendrecv -b 4K -e 4K -n 20 -w 2 -G 1
r -np 4 ./bench/mpinccl_bench -o alltoall -b 16K -e 16K -n 20 -w 2 -G 1
NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=P2P timeout 60 mpirun -np 4 $flags $x -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS ./bench/mpinccl_bench -o halo -b 4K -e 4K -n 2 -w 0 -G 1 > $out/trace-halo.log 2>&1
grep -c . $out/trace-halo.log
pid=$(grep -m1 -oE "^[^:]+:[0-9]+" $out/trace-halo.log); grep "^$pid:" $out/trace-halo.log | grep -v INFO | tail -70 | cut -c1-240
echo quit | nvidia-cuda-mps-control; sleep 1
