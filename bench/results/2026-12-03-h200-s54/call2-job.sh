#!/usr/bin/env bash
# session 54, call 2: build; make check at the session's library source
# (shared window imports, peers that shared nothing, window calls in
# non-blocking groups, virtual-memory buffers, the helpers' CUDA error and
# review changes); then test_p2p's vmm_buffers at 1 and 2 processes with
# nofix2.patch (must fail there) and with the fix again.
out=$1
mkdir -p $out
d=bench/results/2026-12-03-h200-s54
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=150 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'failures$' tests/gpu/*.log | sort | uniq -c
grep -h 'vmm_buffers\|test_peer_left: the group' tests/gpu/*.log | sort | uniq -c | head
flags=$(tests/run-test --mpirun-flags)
vmm() { # $1: label
  TEST_P2P_ONLY=vmm MPINCCL_TEST_NP="1 2" MPINCCL_TEST_TIMEOUT=120 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" \
    tests/run-test tests/gpu/test_p2p > $out/$1-vmm.log 2>&1
  echo "$1 test_p2p vmm_buffers rc=$?"; grep -h 'expected\|failures$\|skipped' $out/$1-vmm.log | cut -c1-250 | sort | uniq -c | head -8
}
patch -p1 < $d/nofix2.patch > /dev/null && echo "fix undone"
make -j16 check TESTS= > $out/nofix-build.log 2>&1 || tail -5 $out/nofix-build.log
vmm nofix
patch -R -p1 < $d/nofix2.patch > /dev/null && echo "fix back"
make -j16 check TESTS= > $out/fix-build.log 2>&1 || tail -5 $out/fix-build.log
vmm fixed
rm -f $out/configure.log $out/nofix-build.log $out/fix-build.log $out/build.log
