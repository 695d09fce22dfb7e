#!/usr/bin/env bash
# Twenty-eighth session: stages of memory-pool buffers freed at a destroy.
# test_p2p's pool steps at 2, 3, 4 processes, under MPS at 2 and 4; then
# the trim taken out (scratch): pool_stages_freed must fail.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
build() { make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }; }
build
flags=$(tests/run-test --mpirun-flags)
pool() { # label np [extra mpirun flags]
  TEST_P2P_ONLY=pool MPINCCL_TEST_TIMEOUT=90 MPINCCL_TEST_NP="$2" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY ${3:-}" \
    tests/run-test ./tests/gpu/test_p2p >"$out/$1.log" 2>&1
  echo "== $1 (np $2): exit $?"; grep -E "pool stages|failures|wrong|np=.*(PASS|FAIL)" "$out/$1.log" | grep -v "done (0 failures" | head -12
}
pool landed "2 3 4"
mps_start
pool landed-mps "2 4" "-x CUDA_MPS_PIPE_DIRECTORY"
mps_stop
cp src/p2p/p2p.c /tmp/p2p.c.keep
sed -i 's/^    mpn_stage_trim(comm->cuda_dev);$/    (void)0;/' src/p2p/p2p.c
cmp -s src/p2p/p2p.c /tmp/p2p.c.keep && echo "   the mutation did not apply"
build
pool mutation 2
cp /tmp/p2p.c.keep src/p2p/p2p.c
build
