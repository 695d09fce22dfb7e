#!/usr/bin/env bash
# session 46, call 8: build at the final library source (the host node of a group
# killed before it is kept past its communicator); test_p2p's graph steps over UCX
# at 2 and 4 ranks and test_rma's over UCX at 2.
out=$1
t0=$SECONDS
if [ ! -f Makefile ]; then (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1; fi
make -j16 > $out/build.log 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma > $out/build-tests.log 2>&1 || { tail -20 $out/build*.log; exit 1; }
echo "built in $((SECONDS-t0)) s; warnings: $(cat $out/build*.log | grep -c -i warning)"
MPINCCL_TEST_NP="2 4" MPINCCL_TEST_TIMEOUT=120 TEST_P2P_ONLY=graph MPINCCL_TRANSPORT=ucx tests/run-test ./tests/gpu/test_p2p > $out/p2p-ucx-graph.log 2>&1
echo "p2p-ucx-graph: exit $? :: $(grep -h 'failures$' $out/p2p-ucx-graph.log | tr '\n' ' ')"
grep -h 'outliving\|not freed' $out/p2p-ucx-graph.log | sort | uniq -c
MPINCCL_TEST_NP="2" MPINCCL_TEST_TIMEOUT=120 TEST_RMA_ONLY=graph MPINCCL_TRANSPORT=ucx tests/run-test ./tests/gpu/test_rma > $out/rma-ucx-graph.log 2>&1
echo "rma-ucx-graph: exit $? :: $(grep -h 'failures$' $out/rma-ucx-graph.log | tr '\n' ' ')"
gzip $out/*.log
echo "done in $((SECONDS-t0)) s"
