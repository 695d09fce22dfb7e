#!/usr/bin/env bash
# session 46, call 6: the GPU tests that exercise this session's changes under
# AddressSanitizer and UBSan (scripts/check-sanitized.sh; leak checks on the unit
# tests only), 2 and 4 ranks: test_p2p (graph steps, new buffers), test_p2p over
# UCX (captured groups, a graph outliving its communicator), test_rma and over UCX.
out=$1
t0=$SECONDS
MPINCCL_TEST_NP="2 4" MPINCCL_TEST_TIMEOUT=240 SANITIZED_JOBS=2 \
  SANITIZED_TESTS="tests/gpu/test_p2p tests/gpu/test_p2p_ucx.sh tests/gpu/test_rma tests/gpu/test_rma_ucx.sh" \
  timeout 570 ./scripts/check-sanitized.sh > $out/log.txt 2>&1
echo "exit $? in $((SECONDS-t0)) s"
grep -E "^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(PASS|FAIL|ERROR|SKIP):|check-sanitized" $out/log.txt | head -30
grep -E "AddressSanitizer|runtime error|LeakSanitizer" $out/log.txt | head -10
gzip $out/log.txt
