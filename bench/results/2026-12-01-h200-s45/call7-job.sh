#!/usr/bin/env bash
# session 45, call 7: the GPU tests under AddressSanitizer and UBSan (scripts/check-sanitized.sh,
# host code of the GPU paths; leak checks on the unit tests only), 2 and 4 ranks.
out=$1
t0=$SECONDS
MPINCCL_TEST_NP="2 4" MPINCCL_TEST_TIMEOUT=200 SANITIZED_JOBS=1 \
  SANITIZED_TESTS="tests/gpu/test_p2p" \
  timeout 560 ./scripts/check-sanitized.sh > $out/log.txt 2>&1
echo "exit $? in $((SECONDS-t0)) s"
grep -E "^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(PASS|FAIL|ERROR|SKIP):|check-sanitized" $out/log.txt | head -30
grep -E "AddressSanitizer|runtime error|LeakSanitizer" $out/log.txt | head -10
gzip $out/log.txt
