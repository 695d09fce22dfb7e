#!/usr/bin/env bash
# session 57, call 4: the pair set-up's wait for a live creator ends at an
# abort of the communicator (the last library change, after run bx): build,
# then make check of the GPU tests over the pairs (send/receive, a peer
# that left, the abort launch) and the pair unit test (trimmed to the
# device time left after a refused start).
out=$1
mkdir -p $out
(autoreconf -fi && ./configure -q && make -j16) > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 timeout 150 make -j6 check TESTS="tests/gpu/test_p2p tests/gpu/test_peer_left tests/gpu/launch_abort_ipc.sh tests/unit/test_pair_setup" > $out/check.log 2>&1
echo "make check exit $?"
grep -E '^(PASS|FAIL|SKIP|ERROR|#)' $out/check.log
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log tests/gpu/test_gpu_comm.log 2>/dev/null | sort | uniq -c
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
rm -f $out/build.log
