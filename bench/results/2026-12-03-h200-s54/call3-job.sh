#!/usr/bin/env bash
# session 54, call 3: build; make check at the session's library source
# after the helpers' changes (split/InitMPI device failures told, imports
# that wait for closes without the cache's lock) and the vmm_buffers test
# fix; test_p2p's vmm_buffers and test_rma's window steps printed.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=150 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'failures$' tests/gpu/*.log | sort | uniq -c
grep -h 'vmm_buffers\|windows_share\|windows_nonblocking\|test_peer_left: the group' tests/gpu/*.log | sort | uniq -c | head -20
rm -f $out/configure.log $out/build.log
