#!/usr/bin/env bash
# session 52, call 2: the session's library source: build, make check.
out=$1
mkdir -p $out
echo "source: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git here')"
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=150 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'threads_late_second_side:' tests/gpu/test_p2p.log tests/gpu/test_p2p_threads.sh.log | sort | uniq -c
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log | sort | uniq -c
grep -h 'launch_bench:' tests/gpu/launch_bench.sh.log | sed 's/^launch_bench: //' | tr '\n' ';'; echo
for f in $out/*.log; do [ -f "$f" ] && grep -hE 'expected|F:|E:' "$f" | head -5; done
rm -f $out/configure.log
