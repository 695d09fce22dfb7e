#!/usr/bin/env bash
# After the final call, issue.c's chained launches stopped putting copies on
# lanes of their own (a multi-GPU path): test_p2p again at the last code,
# chain_three at 3, 4 and 8 processes and the whole of it at 2 and 3.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
TEST_P2P_ONLY=chain_three MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="3 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/chain.log" 2>&1
echo "   chain_three at 3 4 8: exit $?"
MPINCCL_TEST_TIMEOUT=150 MPINCCL_TEST_NP="2 3" MPINCCL_MPIRUN_FLAGS="$flags" \
  tests/run-test ./tests/gpu/test_p2p >"$out/p2p.log" 2>&1
echo "   test_p2p at 2 3: exit $?"
