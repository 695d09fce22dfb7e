#!/usr/bin/env bash
# session 56, call 5: build; the one-sided GPU test and the host tests the
# last library change touched (ncclCommWindowDeregister of NULL: success at
# once, no collective), at the final library source 5d08fcf; what little
# device time was left allowed no whole make check.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check TESTS="tests/gpu/test_rma tests/gpu/test_gpu_comm tests/unit/test_comm_local tests/unit/test_refusals" > $out/check.log 2>&1
grep -E '^(PASS|FAIL|SKIP|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
grep -h 'failures$' tests/gpu/test_rma.log tests/gpu/test_gpu_comm.log | sort | uniq -c
rm -f $out/configure.log $out/build.log
