#!/usr/bin/env bash
# session 55, call 5: build; make check at the session's final library source:
# call 4's and the clean close's notice over UCX (captured one-sided calls
# count for the watchdog unless it came); the UCX tests and the fault
# tests printed.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=150 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'failures$' tests/gpu/*.log tests/mpi/test_ucx*.log | sort | uniq -c
grep -h 'test_peer_left: \|test_ucx_peer_exit: rank' tests/gpu/*.log tests/mpi/*.log | sort | uniq -c | head -20
rm -f $out/configure.log $out/build.log
