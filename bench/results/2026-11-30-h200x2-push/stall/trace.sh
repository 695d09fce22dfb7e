#!/usr/bin/env bash
# Two H200s, after stall/run.sh: the first size stalls only where a
# synchronization separates the warm-up from the timed loop (-c 1).  Does
# a rank import a peer buffer for the first time in the timed loop (the
# roles flipped)?  IPC imports logged (TRACE), with and without fixed
# roles (MPINCCL_PUSH_MIN=1: each rank pushes its own sends at every size).
set -u
source .device/setup.sh
out=$(mktemp -d)/trace; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
b() { # name, extra mpirun flags, bench options
  local name=$1 mf=$2; shift 2
  [ "$mf" = - ] && mf=
  for k in 1 2 3; do
    step "$name $k: $mf $*"
    timeout 60 mpirun -np 2 $flags -x NCCL_DEBUG=TRACE -x NCCL_DEBUG_SUBSYS=IPC $mf ./bench/mpinccl_bench "$@" \
      > $out/$name-$k.txt 2>&1
    grep -v "^#" $out/$name-$k.txt | grep -v "^$" | grep -v TRACE
    grep "imported buffer" $out/$name-$k.txt | sed 's/^\([^ ]*\) .*imported buffer \([0-9]*\).*/  \1 imported buffer \2/'
  done
}
b base - -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3
b pushall "-x MPINCCL_PUSH_MIN=1" -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3
tar czf "$OUT/trace.tgz" -C $(dirname $out) trace
