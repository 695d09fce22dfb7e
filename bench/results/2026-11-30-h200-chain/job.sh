#!/usr/bin/env bash
# Twenty-third session: test_p2p's chain_three (a chain through three
# processes that a receiver's group of steps used to block; issue.c
# issue_chains), first with the chains turned off in a scratch build (it
# must hang), then as landed without and with MPS, then make check.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
flags=$(tests/run-test --mpirun-flags)
cp src/p2p/issue.c /tmp/issue.c.orig
sed -i 's/^  return several \&\& front_steps(plans, n, s) > 1;/  return 0 \&\& several \&\& front_steps(plans, n, s) > 1;/' src/p2p/issue.c
cmp -s src/p2p/issue.c /tmp/issue.c.orig && echo "   the scratch change did not apply"
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
TEST_P2P_ONLY=chain_three MPINCCL_TEST_TIMEOUT=40 MPINCCL_TEST_NP=3 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/unchained.log" 2>&1
echo "   chains off, 3 processes: exit $?"
cp /tmp/issue.c.orig src/p2p/issue.c
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
TEST_P2P_ONLY=chain_three MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="3 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/chained.log" 2>&1
echo "   chains on, 3 4 8 processes: exit $?"
MPINCCL_TEST_TIMEOUT=120 make -j4 check >"$out/check.log" 2>&1
grep -E '^# |^FAIL' "$out/check.log"
mps_start
MPINCCL_TEST_TIMEOUT=120 MPINCCL_TEST_NP="2 3 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/p2p-mps.log" 2>&1
echo "   test_p2p under MPS, 2 3 4 8 processes: exit $?"
mps_stop
