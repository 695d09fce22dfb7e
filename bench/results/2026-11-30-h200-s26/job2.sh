#!/usr/bin/env bash
# Twenty-sixth session, call 3: send/receive graph slots given back when
# their graphs are destroyed.  make check; test_p2p under MPS at 2 and 4;
# test_p2p's graph_recapture alone at 1, 2, 4 and 8; then a mutation:
# without the user objects (no mpn_p2p_graphs_hold), graph_recapture at 2
# must fail at its 256th-odd capture.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
MPINCCL_TEST_TIMEOUT=120 make -j4 check >"$out/check.log" 2>&1
grep -E '^(PASS|FAIL|SKIP|ERROR|#)' "$out/check.log"
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
flags=$(tests/run-test --mpirun-flags)
t() { # label np-list test [mpirun flags]
  MPINCCL_TEST_NP="$2" MPINCCL_MPIRUN_FLAGS="$flags ${4:-}" tests/run-test ./tests/gpu/$3 >"$out/$1.log" 2>&1
  echo "== $1 ($3 at $2): exit $?"
}
TEST_P2P_ONLY=graph_recapture t recapture "1 2 4 8" test_p2p "-x TEST_P2P_ONLY"
grep -h "graph_recapture() done\|failures$" "$out/recapture.log" | sort | uniq -c
mps_start
t p2p-mps "2 4" test_p2p "-x CUDA_MPS_PIPE_DIRECTORY"
grep -h "graph_recapture() done" "$out/p2p-mps.log" | sort | uniq -c
mps_stop
cp src/p2p/p2p.c /tmp/p2p.c.good
sed -i 's/^  mpn_p2p_graphs_hold(plans, n, &current);$/  (void)0; \/* mutation: no user objects *\//' src/p2p/p2p.c
grep -c "mutation: no user objects" src/p2p/p2p.c
make -j16 >/dev/null 2>&1 && make -j16 tests/gpu/test_p2p >/dev/null 2>&1 || echo "mutation build failed"
TEST_P2P_ONLY=graph_recapture MPINCCL_AHEAD_TIMEOUT=2 t mutation "2" test_p2p "-x TEST_P2P_ONLY -x MPINCCL_AHEAD_TIMEOUT"
grep -m3 "capture" "$out/mutation.log"
cp /tmp/p2p.c.good src/p2p/p2p.c
make -j16 >/dev/null 2>&1 && make -j16 tests/gpu/test_p2p >/dev/null 2>&1
