#!/usr/bin/env bash
# session 46, call 9: build at the final library source (one helper for captured
# imports); test_p2p and test_rma graph steps within the host and over UCX
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
MPINCCL_TEST_NP="2 4" MPINCCL_TEST_TIMEOUT=120 TEST_P2P_ONLY=graph tests/run-test ./tests/gpu/test_p2p > $out/p2p-graph.log 2>&1
echo "p2p-graph: exit $? :: $(grep -h 'failures$' $out/p2p-graph.log | tr '\n' ' ')"
grep -h 'held open' $out/p2p-graph.log | sort | uniq -c
MPINCCL_TEST_NP="2 4" MPINCCL_TEST_TIMEOUT=120 TEST_RMA_ONLY=graph tests/run-test ./tests/gpu/test_rma > $out/rma-graph.log 2>&1
echo "rma-graph: exit $? :: $(grep -h 'failures$' $out/rma-graph.log | tr '\n' ' ')"
gzip $out/*.log
echo "done in $((SECONDS-t0)) s"
