#!/usr/bin/env bash
# session 57, call 1: run bw, bench/run-device.sh --no-variants at HEAD e8756fe
# (library source 5d08fcf, not yet covered by a whole GPU make check):
# make check, every benchmark in both regimes, halo3d, plain CUDA's shapes,
# the MPS test runs, compute-sanitizer, summary.md.
out=$1
mkdir -p $out
bench/run-device.sh $out/res --no-variants > $out/log.txt 2>&1
echo "run-device exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(FAIL|ERROR):' $out/log.txt | head
echo "warnings: $(grep -c 'warning:' $out/res/build.log)"
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log tests/gpu/test_rma_ucx.sh.log tests/gpu/test_gpu_comm.log 2>/dev/null | sort | uniq -c
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
cp $out/res/summary.md $out/summary.md 2>/dev/null
grep -E '\| (met|\*\*not met\*\*|not run) \|$' $out/summary.md
cd $out && tar czf res.tgz res log.txt && rm -rf res log.txt
