#!/usr/bin/env bash
# session 49, call 2: run bp, bench/run-device.sh --no-variants at HEAD (the
# library source of session 48's end, b4c4943, and bench/summary.py), then
# the graph benchmark with more captured messages per pair over a run (18
# sizes x 20) than a pair has graph slots (256): each size's graphs are
# destroyed before the next size captures.
out=$1
echo "source: $(git rev-parse --short HEAD 2>/dev/null || echo 'no git here')"
bench/run-device.sh $out/res --no-variants > $out/log.txt 2>&1
echo "run-device exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|warning' $out/log.txt | head
cp $out/res/summary.md $out/summary.md 2>/dev/null
grep -E '\| (met|\*\*not met\*\*|not run) \|$' $out/summary.md
flags=$(tests/run-test --mpirun-flags)
timeout 120 mpirun -np 2 $flags ./bench/mpinccl_bench -o sendrecv -b 8 -e 1M -f 2 -n 20 -w 2 -G 1 > $out/graph-many.txt 2>&1
echo "graph, 18 sizes x 20 captured: exit $?"; grep -E '^ +[0-9]+ ' $out/graph-many.txt | tail -3
cd $out && tar czf res.tgz res log.txt && rm -rf res
