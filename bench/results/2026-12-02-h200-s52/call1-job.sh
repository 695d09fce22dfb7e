#!/usr/bin/env bash
# session 52, call 1: run bq, bench/run-device.sh --no-variants at the
# library source of session 51's end (bf4d051), which no device call had
# run: make check, every benchmark in both regimes, halo3d, plain CUDA's
# shapes, summary.md.
out=$1
echo "source: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git here')"
bench/run-device.sh $out/res --no-variants > $out/log.txt 2>&1
echo "run-device exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|warning' $out/log.txt | head
cp $out/res/summary.md $out/summary.md 2>/dev/null
grep -E '\| (met|\*\*not met\*\*|not run) \|$' $out/summary.md
cd $out && tar czf res.tgz res log.txt && rm -rf res
