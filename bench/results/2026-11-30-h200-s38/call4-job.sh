#!/usr/bin/env bash
# session 38 call 4: A/B of the final source against 585d594 (the previous
# HEAD) in the same job, interleaved: MPS 8 B sendrecv, put ping-pong, 8-rank
# barrier, 2-rank captured sendrecv 8 B; no MPS 8 B sendrecv.
out=$1
step() { echo "== $(date +%T) $*"; }
step build
(autoreconf -fi && ./configure -q && make -j16) > $out/build.log 2>&1 &
(rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp && cd /tmp/old && autoreconf -fi && ./configure -q && make -j16) > $out/build-old.log 2>&1 &
wait
[ -x ./bench/mpinccl_bench ] && [ -x /tmp/old/bench/mpinccl_bench ] || { echo "build failed"; tail -5 $out/build.log $out/build-old.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
one() { # label bench np args
  local v=$1 b=$2 np=$3; shift 3
  timeout 60 mpirun -np $np $flags $x $b "$@" 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1
}
ab() { # label np args
  local name=$1 np=$2; shift 2
  for k in 1 2 3; do for v in new old; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    echo "   $name $v $k: $(one $v $b $np "$@")" | tee -a $out/ab.txt
  done; done
}
x=""
step "no MPS"
ab sendrecv-8B 2 -o sendrecv -b 8 -e 8 -n 1000 -w 100
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS"
ab sendrecv-8B 2 -o sendrecv -b 8 -e 8 -n 1000 -w 100
ab putpingpong-8B 2 -o putpingpong -b 8 -e 8 -n 50 -w 10
ab barrier-np8 8 -o barrier -n 1000 -w 100
ab captured-sendrecv-8B 2 -o sendrecv -b 8 -e 8 -n 100 -w 10 -G 1
echo quit | nvidia-cuda-mps-control; sleep 1
step done
