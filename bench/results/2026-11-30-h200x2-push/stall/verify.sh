#!/usr/bin/env bash
# Two H200s: the benchmark's warm-up in which each rank once posts last
# (roles_warmup in bench/bench.c) against the first-size stall that
# stall/run.sh and stall/trace.sh found; then a full sendrecv sweep, the
# 2-rank ping-pong and halo3d with 2 and 4 ranks over both GPUs.
set -u
source .device/setup.sh
out=$(mktemp -d)/verify; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
b() { # name, np, bench options
  local name=$1 np=$2; shift 2
  step "$name: $*"
  timeout 100 mpirun -np $np $flags ./bench/mpinccl_bench "$@" --json $out/$name.json > $out/$name.txt 2>&1
  grep -v "^#" $out/$name.txt | grep -v "^$"
}
for k in 1 2 3; do b small$k 2 -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3; done
b sendrecv 2 -o sendrecv -b 8 -e 1G -f 8 -n 20 -w 5
b pingpong 2 -o pingpong -b 8 -e 1G -f 8 -n 20 -w 5
b alltoall4 4 -o alltoall -b 64K -e 256M -f 4 -n 10 -w 3
step halo3d
for np in 2 4; do for mode in "" --put --flag-sync; do
  echo "halo3d np$np ${mode:-exchange}: $(timeout 100 mpirun -np $np $flags ./examples/halo3d $mode 2>&1 | grep -E 'time/iter|check' | tr '\n' ' ')"
done; done | tee $out/halo3d.txt
tar czf "$OUT/verify.tgz" -C $(dirname $out) verify
