#!/usr/bin/env bash
# session 54, call 4: run bs, bench/run-device.sh --no-variants at the
# session's final library source: make check (the session's new GPU steps
# among them), every benchmark in both regimes, halo3d, plain CUDA's
# shapes, the MPS test runs, compute-sanitizer, summary.md.
out=$1
mkdir -p $out
bench/run-device.sh $out/res --no-variants > $out/log.txt 2>&1
echo "run-device exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(FAIL|ERROR):' $out/log.txt | head
grep -c 'warning:' $out/res/build.log
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log tests/gpu/test_rma_ucx.sh.log tests/gpu/test_gpu_comm.log 2>/dev/null | sort | uniq -c
grep -h 'vmm_buffers\|windows_share\|windows_nonblocking' tests/gpu/test_p2p.log tests/gpu/test_rma.log 2>/dev/null | grep -v 'done (0' | sort | uniq -c | head
cp $out/res/summary.md $out/summary.md 2>/dev/null
grep -E '\| (met|\*\*not met\*\*|not run) \|$' $out/summary.md
cd $out && tar czf res.tgz res log.txt && rm -rf res log.txt
