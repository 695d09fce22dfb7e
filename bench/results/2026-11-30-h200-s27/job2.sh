#!/usr/bin/env bash
# Twenty-seventh session, call 5: the graph slots' hand-back with release
# words per side that only grow (call 4 found a slot whose release bits
# read 0).  graph_recapture alone at 4 and 8 processes, 3 rounds without
# MPS and 3 with.  Everything is
# appended to one log as it goes (the device tool returns few files).
set -u
out=${1:?outdir}
mkdir -p "$out"
log="$out/job2.log"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log" >>"$log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
rec() { # label np-list [mpirun flags]
  TEST_P2P_ONLY=graph_recapture MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="$2" \
    MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY ${3:-}" tests/run-test ./tests/gpu/test_p2p >"$out/rec.tmp" 2>&1
  echo "== $(date +%T) $1: exit $?" >>"$log"
  grep -h "graph records\|capture [0-9]*:\|failures$\|np=.*:" "$out/rec.tmp" | sort | uniq -c >>"$log"
}
for k in 1 2 3; do rec "recapture round $k" "4 8"; done
mps_start
for k in 1 2 3; do rec "recapture under MPS round $k" "4 8" "-x CUDA_MPS_PIPE_DIRECTORY"; done
mps_stop
echo "== $(date +%T) done" >>"$log"
