#!/usr/bin/env bash
# After the final read's refactor (shared index and UCX helpers in rma.h,
# in_step in issue.c): test_rma at 2 and 4, chain_three at 3, one barrier job.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_rma tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags" tests/run-test ./tests/gpu/test_rma >"$out/rma.log" 2>&1
echo "   test_rma at 2 4: exit $?"
TEST_P2P_ONLY=chain_three MPINCCL_TEST_TIMEOUT=40 MPINCCL_TEST_NP=3 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/chain.log" 2>&1
echo "   chain_three at 3: exit $?"
timeout 30 mpirun -np 8 $flags ./bench/mpinccl_bench -o barrier -n 1000 -w 100 2>&1 | grep -E '^ +0 ' | tee "$out/barrier.txt"
