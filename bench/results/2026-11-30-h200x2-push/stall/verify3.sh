#!/usr/bin/env bash
# Two H200s, after verify2.sh: the roles warm-up at the sweep's largest size
# (small messages take the inbox, which imports nothing: the imports had
# moved to the first size above MPINCCL_EAGER_MAX, 32 KiB).

set -u
source .device/setup.sh
out=$(mktemp -d)/verify3; mkdir -p $out
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
  b small$k 2 -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3
  b sendrecv$k 2 -o sendrecv -b 8 -e 1G -f 8 -n 20 -w 5
  b pingpong$k 2 -o pingpong -b 8 -e 1G -f 8 -n 20 -w 5
done
tar czf "$OUT/verify3.tgz" -C $(dirname $out) verify3
