#!/usr/bin/env bash
# session 49, call 6: the session's last library source (a late rendezvous
# answer dropped, mpn_chan_forget_tag): build, make check (what the
# session's device time left allows).
out=$1
mkdir -p $out
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'Checks' tests/unit/test_comm_local.log | tail -1
