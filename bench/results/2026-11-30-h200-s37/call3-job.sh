#!/usr/bin/env bash
# session 35: the whole device run (make check + benchmarks, both regimes)
out=$1
d=$(mktemp -d)
bench/run-device.sh $d/res --no-variants > $out/log.txt 2>&1; echo "exit $?" >> $out/log.txt
cp $d/res/perf.png $out/ 2>/dev/null
tar czf $out/res.tgz -C $d res
ls -la $out
grep -E "^# |^FAIL|median|ratios|run-test: np=.*FAIL|exit|barrier|dissem" $out/log.txt | head -120
