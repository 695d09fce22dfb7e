#!/usr/bin/env bash
# session 46, call 1: build; test_p2p graph_recapture over UCX (2 ranks) with the
# reclaim of ucx/graph.c freeing groups whole, then with the reclaim put back to
# freeing their staging only (a scratch edit, undone), to see the check fail.
out=$1
t0=$SECONDS
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
grep -c -i warning $out/build.log
make -j16 tests/gpu/test_p2p > $out/build-test.log 2>&1 || { tail -30 $out/build-test.log; exit 1; }
echo "built in $((SECONDS-t0)) s"
one() { # tag
  MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=200 TEST_P2P_ONLY=graph_recapture MPINCCL_TRANSPORT=ucx \
    tests/run-test ./tests/gpu/test_p2p > $out/$1.log 2>&1
  echo "$1: exit $? :: $(grep -h 'not freed\|failures$' $out/$1.log | tr '\n' ' ')"
  grep -h 'EXPECT\|failed' $out/$1.log | head -4
}
one fixed
sed -i 's/^    group_destroy(g);$/    group_free(g, 0);/' src/ucx/graph.c
git diff --stat
make -j16 tests/gpu/test_p2p > $out/build-revert.log 2>&1 || { tail -30 $out/build-revert.log; exit 1; }
one reverted
git checkout src/ucx/graph.c
make -j16 tests/gpu/test_p2p > /dev/null 2>&1
echo "done in $((SECONDS-t0)) s"
