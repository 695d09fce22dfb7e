#!/usr/bin/env bash
# session 38 call 8: the 8-rank halo (64 KiB faces, not captured), final
# source against 585d594, interleaved: MPS three rounds, no MPS two.
out=$1
step() { echo "== $(date +%T) $*"; }
step build
(autoreconf -fi && ./configure -q && make -j8) > $out/build.log 2>&1 &
(rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp && cd /tmp/old && autoreconf -fi && ./configure -q && make -j8) > $out/build-old.log 2>&1 &
wait
[ -x ./bench/mpinccl_bench ] && [ -x /tmp/old/bench/mpinccl_bench ] || { echo "build failed"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
ab() { local rounds=$1 k v b; for k in $(seq $rounds); do for v in new old; do
  b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
  echo "   $2 $v $k: $(timeout 60 mpirun -np 8 $flags $x $b -o halo -b 64K -e 64K -n 20 -w 5 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)" | tee -a $out/halo-ab.txt
done; done; }
x=""; step "no MPS"; ab 2 nomps
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"; step MPS; ab 3 mps
echo quit | nvidia-cuda-mps-control; sleep 1
step done
