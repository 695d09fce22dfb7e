#!/usr/bin/env bash
# session 54, call 1: build; test_peer_left (2 processes) and test_rma's
# windows_share_allocation (2 and 4 processes, and the whole of test_rma
# at 2) with the session's two fixes, then with nofix.patch (each fix
# undone), where both new checks must fail, then with the fixes again.
out=$1
mkdir -p $out
d=bench/results/2026-12-03-h200-s54
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
run_all() { # $1: label
  MPINCCL_TEST_TIMEOUT=120 tests/run-test tests/gpu/test_peer_left > $out/$1-peer_left.log 2>&1
  echo "$1 test_peer_left rc=$?"; grep -h 'test_peer_left\|FAIL\|expected' $out/$1-peer_left.log | cut -c1-300 | head -8
  for np in 2 4; do
    TEST_RMA_ONLY=windows_share MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=120 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" \
      tests/run-test tests/gpu/test_rma > $out/$1-rma-$np.log 2>&1
    echo "$1 test_rma windows_share_allocation np=$np rc=$?"; grep -h 'expected\|failures$\|FAIL' $out/$1-rma-$np.log | sort | uniq -c | head
  done
}
run_all fixed
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=300 tests/run-test tests/gpu/test_rma > $out/fixed-rma-all.log 2>&1
echo "fixed test_rma (all steps) np=2 rc=$?"; grep -h 'failures$' $out/fixed-rma-all.log | sort | uniq -c
patch -p1 < $d/nofix.patch > /dev/null && echo "fixes undone"
make -j16 check TESTS= > $out/nofix-build.log 2>&1 || tail -5 $out/nofix-build.log
run_all nofix
patch -R -p1 < $d/nofix.patch > /dev/null && echo "fixes back"
make -j16 check TESTS= > $out/fix-build.log 2>&1 || tail -5 $out/fix-build.log
rm -f $out/configure.log $out/nofix-build.log $out/fix-build.log
