#!/usr/bin/env bash
# session 38: the whole device run at the final source (make check,
# both regimes' benchmarks, MPS tests, fault/abort under MPS, compute-sanitizer)
out=$1
d=$(mktemp -d)
bench/run-device.sh $d/res --no-variants > $out/log.txt 2>&1; echo "exit $?" >> $out/log.txt
cp $d/res/perf.png $out/ 2>/dev/null
tar czf $out/res.tgz -C $d res
grep -E "^# |^FAIL|median|best of 3|run-test: np=.*FAIL|exit|MPS: exit|warning" $out/log.txt | head -80
