#!/usr/bin/env bash
# Twenty-fourth session, call 4, after the desk reviews' fixes (windows,
# lanes, eager send failures, creation jobs, set-up timeout): make check;
# test_rma (window_agreement among its steps) at 3 and 8 processes;
# test_p2p and test_rma under MPS at 2 and 4; the window steps and the
# chains under MPS at 3.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
make -j4 check >"$out/check.log" 2>&1
echo "== make check: exit $?"; grep -E "^(PASS|FAIL|SKIP|ERROR)|^# " "$out/check.log"
MPINCCL_TEST_NP="3 8" tests/run-test ./tests/gpu/test_rma >"$out/rma-3-8.log" 2>&1
echo "== test_rma at 3 and 8: exit $?"
mps_start
MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
  tests/run-test ./tests/gpu/test_rma >"$out/rma-mps.log" 2>&1
echo "== test_rma under MPS at 2 and 4: exit $?"
MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
  tests/run-test ./tests/gpu/test_p2p >"$out/p2p-mps.log" 2>&1
echo "== test_p2p under MPS at 2 and 4: exit $?"
mps_stop
for f in "$out"/*.log; do grep -E 'failures|np=.*(FAIL|timed)|wrong' "$f" | grep -v " 0 failures" | head -5 | sed "s|^|$(basename $f): |"; done
