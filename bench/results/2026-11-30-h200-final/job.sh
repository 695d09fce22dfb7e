#!/usr/bin/env bash
# Last call of the twenty-third session, at the session's final code:
# make check; test_p2p and test_rma under MPS at 2, 3 and 4 processes; the
# 8 B sendrecv and the 8-rank barrier without MPS, 5 jobs each, as
# bench/run-device.sh now runs them.  Usage: job.sh OUTDIR
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
MPINCCL_TEST_TIMEOUT=120 make -j4 check >"$out/check.log" 2>&1
grep -E '^# |^FAIL' "$out/check.log"
for k in 1 2 3 4 5; do
  line=$(timeout 60 mpirun -np 2 $flags ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +8 ' | head -n 1)
  echo "   sendrecv-8B job $k: ${line:-failed}"
done | tee "$out/repeats.txt"
for k in 1 2 3 4 5; do
  line=$(timeout 60 mpirun -np 8 $flags ./bench/mpinccl_bench -o barrier -n 1000 -w 100 2>&1 | grep -E '^ +0 ' | head -n 1)
  echo "   barrier-np8 job $k: ${line:-failed}"
done | tee -a "$out/repeats.txt"
mps_start
for t in p2p rma; do
  MPINCCL_TEST_TIMEOUT=120 MPINCCL_TEST_NP="2 3 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
    tests/run-test ./tests/gpu/test_$t >"$out/$t-mps.log" 2>&1
  echo "   test_$t under MPS, 2 3 4 processes: exit $?"
done
mps_stop
