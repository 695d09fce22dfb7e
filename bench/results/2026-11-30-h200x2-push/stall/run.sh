#!/usr/bin/env bash
# Two H200s: the first size of a run stalls (PERFORMANCE.md, twentieth
# session, known problem 3 on two GPUs).  Which of iterations, warm-up,
# the flag kernel, process binding, the operation or the size it follows.
set -u
source .device/setup.sh
out=$(mktemp -d)/stall; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
b() { # name, extra mpirun flags (one word or -), bench options
  local name=$1 mf=$2; shift 2
  [ "$mf" = - ] && mf=
  step "$name: $mf $*"
  timeout 60 mpirun -np 2 $flags $mf ./bench/mpinccl_bench "$@" > $out/$name.txt 2>&1
  grep -v "^#" $out/$name.txt | grep -v "^$"
}
b base - -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3
b iters100 - -o sendrecv -b 64K -e 256K -f 2 -n 100 -w 3
b warm50 - -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 50
b nokernel "-x MPINCCL_KERNEL_SYNC=0" -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3
b nobind "--bind-to none" -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3
b bindings "--report-bindings" -o sendrecv -b 64K -e 64K -n 10 -w 3
b pingpong - -o pingpong -b 64K -e 256K -f 2 -n 10 -w 3
b nocheck - -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3 -c 0
b again - -o sendrecv -b 64K -e 256K -f 2 -n 10 -w 3
tar czf "$OUT/stall.tgz" -C $(dirname $out) stall
