#!/usr/bin/env bash
# session 56, call 1: run bu, bench/run-device.sh --no-variants at bf472a1:
# the fifty-fifth session's final library source, which no full GPU run covered:
# make check, every benchmark in both regimes, halo3d, plain
# CUDA's shapes, the MPS test runs, compute-sanitizer, summary.md.
out=$1
mkdir -p $out
bench/run-device.sh $out/res --no-variants > $out/log.txt 2>&1
echo "run-device exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(FAIL|ERROR):' $out/log.txt | head
grep -c 'warning:' $out/res/build.log
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log tests/gpu/test_rma_ucx.sh.log tests/gpu/test_gpu_comm.log 2>/dev/null | sort | uniq -c
grep -h "vmm_buffers\|windows_share\|windows_nonblocking\|stage\|flags" tests/gpu/test_p2p.log tests/gpu/test_rma.log 2>/dev/null | grep -ci "fail"
cp $out/res/summary.md $out/summary.md 2>/dev/null
grep -E '\| (met|\*\*not met\*\*|not run) \|$' $out/summary.md
cd $out && tar czf res.tgz res log.txt && rm -rf res log.txt
