#!/usr/bin/env bash
# session 53, call 4: the final library source after the prefix list
# (the only library change since call 3, in src/ucx/prefix.c): build,
# make check.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=150 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'failures$' tests/gpu/*.log | sort | uniq -c
grep -h 'test_put_lost: 2 ranks\|graph_destroy_early:' tests/gpu/*.log | sort | uniq -c
rm -f $out/configure.log $out/build.log
