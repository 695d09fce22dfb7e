#!/usr/bin/env bash
# session 53, call 1: build; test_put_lost (UCX forced) and test_rma's
# graph_destroy_early (UCX forced, and within the host) at 2 processes,
# with the session's fixes, then with fixes.patch reversed (both must fail
# there), then with them again.
out=$1
mkdir -p $out
d=bench/results/2026-12-02-h200-s53
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
run_all() { # $1: label
  MPINCCL_TEST_TIMEOUT=120 tests/gpu/launch_put_lost.sh > $out/$1-put_lost.log 2>&1
  echo "$1 launch_put_lost rc=$?"; grep -h 'test_put_lost' $out/$1-put_lost.log | cut -c1-300
  for t in test_rma_ucx.sh test_rma; do
    TEST_RMA_ONLY=graph_destroy MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=120 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" \
      tests/run-test tests/gpu/$t > $out/$1-$t.log 2>&1
    echo "$1 $t graph_destroy_early rc=$?"; grep -h 'expected\|failures$\|graph_destroy' $out/$1-$t.log | sort | uniq -c | head
  done
}
run_all fixed
patch -R -p1 < $d/fixes.patch > /dev/null && echo "fixes reversed"
make -j16 check TESTS= > $out/nofix-build.log 2>&1 || tail -5 $out/nofix-build.log
run_all nofix
patch -p1 < $d/fixes.patch > /dev/null && echo "fixes back"
make -j16 check TESTS= > $out/fix-build.log 2>&1 || tail -5 $out/fix-build.log
rm -f $out/configure.log
