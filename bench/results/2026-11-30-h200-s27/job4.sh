#!/usr/bin/env bash
# Twenty-seventh session, call 9: graph slots after the desk review (a
# slot the same capture holds refused at once; a capture waiting for the
# destroy of the graph holding its slot: test_rma graph_slot_wait,
# test_p2p graph_same_capture), and captured groups over UCX freed with
# their graph: the graph steps of test_rma and test_p2p at 1-4 and 8
# processes, without and with MPS, and over UCX.  One log, as it goes.
set -u
out=${1:?outdir}
mkdir -p "$out"
log="$out/job4.log"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log" >>"$log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
t() { # label np-list test env-var [mpirun flags]
  TEST_RMA_ONLY=graph TEST_P2P_ONLY=graph MPINCCL_TEST_TIMEOUT=90 MPINCCL_TEST_NP="$2" \
    MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY -x TEST_P2P_ONLY ${4:-}" tests/run-test ./tests/gpu/$3 >"$out/t.tmp" 2>&1
  echo "== $(date +%T) $1: exit $?" >>"$log"
  grep -h "still held\|graph records\|capture [0-9]*:\|expected\|failures$\|np=.*: \(PASS\|FAIL\)\|timed out" "$out/t.tmp" | sort | uniq -c >>"$log"
}
t "test_rma graph steps" "1 2 3 4 8" test_rma
t "test_p2p graph steps" "1 2 3 4 8" test_p2p
t "test_rma graph steps over UCX" "2 4" test_rma_ucx.sh
t "test_p2p graph steps over UCX" "2 4" test_p2p_ucx.sh
mps_start
t "test_rma graph steps under MPS" "2 4 8" test_rma "-x CUDA_MPS_PIPE_DIRECTORY"
t "test_p2p graph steps under MPS" "2 4" test_p2p "-x CUDA_MPS_PIPE_DIRECTORY"
mps_stop
echo "== $(date +%T) done" >>"$log"
