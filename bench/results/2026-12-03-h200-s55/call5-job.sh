#!/usr/bin/env bash
# session 55, call 5: build; the GPU tests over UCX and the peer tests at
# the session's final library source (call 4's, and the clean close's
# notice over UCX: captured one-sided calls count for the watchdog unless
# it came).  Not the whole make check: too little device time was left
# after three refused starts.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=100 MPINCCL_TEST_NP="2 4" make -j6 check TESTS="tests/gpu/test_rma_ucx.sh tests/gpu/test_p2p_ucx.sh \
  tests/gpu/launch_fault_ucx.sh tests/gpu/launch_abort_ucx.sh tests/gpu/launch_fault_remote.sh \
  tests/gpu/launch_put_lost.sh tests/gpu/test_peer_left tests/mpi/test_ucx_peer_exit tests/mpi/test_ucx_failures" \
  > $out/check.log 2>&1
grep -E '^(PASS|FAIL|ERROR|SKIP)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
grep -h 'failures$' tests/gpu/*ucx*.log tests/mpi/test_ucx*.log 2>/dev/null | sort | uniq -c
rm -f $out/configure.log $out/build.log
