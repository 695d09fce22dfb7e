#!/usr/bin/env bash
# session 48, call 4: the session's library source after the desk review's
# fixes (same host means the same /dev/shm, the 8192-rank limit over UCX,
# device memory unstaged to UCX only with MPINCCL_UCX_DIRECT=2): build,
# make check, test_p2p/test_rma over UCX at 2 and 4, run-demo.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'Checks' tests/unit/test_comm_local.log
grep -h 'private_shm' tests/unit/test_comm_local.log
grep -h 'failures$' tests/gpu/test_p2p_ucx.sh.log tests/gpu/test_rma_ucx.sh.log 2>/dev/null | sort | uniq -c
./run-demo > $out/demo.log 2>&1; echo "run-demo exit $? :: $(grep -h 'per iteration\|PASS\|FAIL' $out/demo.log | tail -3 | tr '\n' ' ')"
