#!/usr/bin/env bash
# Twenty-third session: bench/mpinccl_barriers with the new `packed` shape
# (two targets' 32-bit counts per 64-bit write), 8 and 4 ranks, no MPS,
# three jobs each.  Usage: job.sh OUTDIR
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
for k in 1 2 3; do
  for np in 8 4; do
    timeout 120 mpirun -np $np $flags ./bench/mpinccl_barriers -n 1000 2>&1
  done
done | tee "$out/shapes.txt"
