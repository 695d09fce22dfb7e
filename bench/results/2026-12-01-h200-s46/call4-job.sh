#!/usr/bin/env bash
# session 46, call 4: build; test_p2p's and test_rma's graph steps at 2 and 4 ranks
# with captured imports held open only while their graphs live; then
# graph_new_buffers with a scratch edit that keeps every captured import
# open for good (the news of a graph gone read as "no record hung"), undone.
out=$1
t0=$SECONDS
if [ ! -f Makefile ]; then (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1; fi
make -j16 > $out/build.log 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma > $out/build-tests.log 2>&1 || { tail -20 $out/build*.log; exit 1; }
echo "built in $((SECONDS-t0)) s; warnings: $(cat $out/build*.log | grep -c -i warning)"
run() { # tag env...
  local tag=$1; shift
  env "$@" MPINCCL_TEST_TIMEOUT=200 tests/run-test ./tests/gpu/${prog} > $out/$tag.log 2>&1
  echo "$tag: exit $? :: $(grep -h 'failures$' $out/$tag.log | tr '\n' ' ')"
  grep -h 'held open\|EXPECT\|Caught\|WARN' $out/$tag.log | sort | uniq -c | head -8
}
prog=test_p2p run p2p-graph MPINCCL_TEST_NP="2 3 4" TEST_P2P_ONLY=graph
prog=test_rma run rma-graph MPINCCL_TEST_NP="2 4" TEST_RMA_ONLY=graph
prog=test_p2p run p2p-all MPINCCL_TEST_NP="2 4"
prog=test_rma run rma-all MPINCCL_TEST_NP="2 4"
sed -i 's/seq != 0 ? PIN_GONE : PIN_KEPT/PIN_KEPT/' src/cuda/ipc.c
git diff --stat src/cuda/ipc.c
make -j16 tests/gpu/test_p2p > $out/build-scratch.log 2>&1 || { tail -20 $out/build-scratch.log; exit 1; }
prog=test_p2p run scratch MPINCCL_TEST_NP="2" TEST_P2P_ONLY=graph_new_buffers
git checkout src/cuda/ipc.c && make -j16 tests/gpu/test_p2p > /dev/null 2>&1
gzip $out/*.log
echo "done in $((SECONDS-t0)) s"
