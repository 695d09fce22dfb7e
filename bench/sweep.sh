#!/usr/bin/env bash
# sweep.sh - one mpinccl_bench run per setting, for experiments on the GPU
# machine: sweep.sh OUT NAME NP "VAR=value ..." BENCH-ARGS...  runs the
# benchmark with those variables set and exported to every rank, writes
# OUT/NAME.txt and prints its floors and the rows of the sizes asked for in
# SWEEP_ROWS (a grep pattern of sizes, default 0|8|268435456).
set -u
out=$1 name=$2 np=$3 vars=$4
shift 4
cd "$(dirname "$0")/.." || exit 1
xs=""
for v in $vars; do xs="$xs -x ${v%%=*}"; done
env $vars timeout 120 mpirun -np "$np" $(tests/run-test --mpirun-flags) $xs ${SWEEP_MPIRUN:-} \
  ./bench/mpinccl_bench "$@" >"$out/$name.txt" 2>&1 || echo "   ($name: exit $?)"
echo "== $name ($np ranks${vars:+, $vars})"
grep -E "^#  +(flag-only|barrier  )|^#  +UCX |^ +(${SWEEP_ROWS:-0|8|268435456}) " "$out/$name.txt"
