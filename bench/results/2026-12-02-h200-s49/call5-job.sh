#!/usr/bin/env bash
# session 49, call 5: the session's last library source (b4c4943 with one
# parameter's help text changed): build, make check (test_bench_summary.sh
# new in it), run-demo; then initcheck on test_p2p's ring steps at 1 rank,
# where every buffer is this process's own: call 4's reports at 2 ranks
# should then be the other process's writes, which initcheck cannot see.
out=$1
mkdir -p $out
echo "source: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git here')"
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
grep -h 'test_bench_summary' tests/unit/test_bench_summary.sh.log | tail -1
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
./run-demo > $out/run-demo.log 2>&1; echo "run-demo exit $?"; grep -E 'time/iter|check' $out/run-demo.log | tail -2
flags=$(tests/run-test --mpirun-flags)
cs="./libtool --mode=execute compute-sanitizer --report-api-errors no --error-exitcode 9"
timeout 60 mpirun -np 1 $flags -x TEST_P2P_ONLY="ring(sizes" $cs --tool initcheck ./tests/gpu/test_p2p > $out/p2p1-initcheck.log 2>&1
echo "initcheck, test_p2p ring steps, 1 rank: exit $?; $(grep -h 'ERROR SUMMARY' $out/p2p1-initcheck.log | tr '\n' ' ')"
grep -h 'failures$' $out/p2p1-initcheck.log
