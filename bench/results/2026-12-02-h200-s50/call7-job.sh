#!/usr/bin/env bash
# session 50, call 7 (same machine as call 6): the 8 B sendrecv of 2 ranks
# under MPS, the session's first library source (2c3fdf6, the machine's own
# .git HEAD) against the final one, interleaved, 3 jobs each: call 6 gave a
# median of 2.21x the flag-only floor (runs bg-bp: 1.51-2.07x).
out=$1
mkdir -p $out
echo "machine's git HEAD: $(git rev-parse --short HEAD)"
rm -rf /tmp/old && git worktree add -f /tmp/old HEAD > $out/worktree.log 2>&1 || { cat $out/worktree.log; exit 1; }
(cd /tmp/old && autoreconf -fi && ./configure -q && make -j16 && make -j16 bench/mpinccl_bench) > $out/build-old.log 2>&1 || { tail -20 $out/build-old.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for k in 1 2 3; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY $b -o sendrecv -b 8 -e 8 -n 1000 -w 100 > $out/$v-$k.txt 2>&1
    echo "$v job $k: $(grep -E '^ +8 ' $out/$v-$k.txt | head -1)"
  done
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
