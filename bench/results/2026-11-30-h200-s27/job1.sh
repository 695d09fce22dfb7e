#!/usr/bin/env bash
# Twenty-seventh session, call 4: the graph slots' hand-back again (the
# reverted bcf5408, now with counts of records attached and released and
# slot sides filed and marked), and the capture status read from
# ncclGroupEnd's check.  graph_recapture alone at 2, 4 and 8 processes,
# 4 rounds without MPS and 2 with; then make check.  Everything is
# appended to one log as it goes (the device tool returns few files).
set -u
out=${1:?outdir}
mkdir -p "$out"
log="$out/job1.log"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log" >>"$log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
rec() { # label np-list [mpirun flags]
  TEST_P2P_ONLY=graph_recapture MPINCCL_TEST_TIMEOUT=90 MPINCCL_TEST_NP="$2" \
    MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY ${3:-}" tests/run-test ./tests/gpu/test_p2p >"$out/rec.tmp" 2>&1
  echo "== $(date +%T) $1: exit $?" >>"$log"
  grep -h "graph records\|capture [0-9]*:\|failures$\|np=.*:" "$out/rec.tmp" | sort | uniq -c >>"$log"
}
for k in 1 2 3 4; do rec "recapture round $k" "2 4 8"; done
mps_start
for k in 1 2; do rec "recapture under MPS round $k" "4 8" "-x CUDA_MPS_PIPE_DIRECTORY"; done
mps_stop
echo "== $(date +%T) make check" >>"$log"
MPINCCL_TEST_TIMEOUT=120 make -j4 check >"$out/check.log" 2>&1
grep -E '^(PASS|FAIL|SKIP|ERROR|#)' "$out/check.log" >>"$log"
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do
  echo "---- $f" >>"$log"; grep -v "done (0 failures" "${f%.trs}.log" | tail -40 >>"$log"
done
grep -h "graph records" tests/gpu/test_p2p.log | sort | uniq -c >>"$log"
echo "== $(date +%T) done" >>"$log"
