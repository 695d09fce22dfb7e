#!/usr/bin/env bash
# Two H200s, after verify.sh: the 256 KiB row of an 8 B-1 GiB sweep
# stalled (the first launch wanting several blocks made the flag kernels'
# pool of counters); the pool is now made at communicator creation.
set -u
source .device/setup.sh
out=$(mktemp -d)/verify2; mkdir -p $out
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
for k in 1 2; do
  b sendrecv$k 2 -o sendrecv -b 8 -e 1G -f 8 -n 20 -w 5
  b pingpong$k 2 -o pingpong -b 8 -e 1G -f 8 -n 20 -w 5
done
tar czf "$OUT/verify2.tgz" -C $(dirname $out) verify2
