#!/usr/bin/env bash
# session 46, call 5: 8 B sendrecv without MPS (-n 1000 -w 100, as run-device.sh's
# repeats), four interleaved rounds of: the default; MPINCCL_DELEGATE_WAIT_US=0 (the
# lower rank does not wait on the host for its peer's post). Each job's time, ratio
# to its delegated floor, and host time per group (mean and the slower rank's).
out=$1
t0=$SECONDS
if [ ! -f Makefile ]; then (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1; fi
make -j16 > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "built in $((SECONDS-t0)) s"
flags=$(tests/run-test --mpirun-flags)
one() { # tag env...
  local tag=$1; shift
  env "$@" timeout 60 mpirun -np 2 $flags -x MPINCCL_DELEGATE_WAIT_US ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 \
    -n 1000 -w 100 --json $out/$tag.json > $out/$tag.txt 2>&1
  python3 - "$out/$tag.json" "$tag" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); r = d["results"][0]
print("%-10s time %6.2f us  vs-floor %5.2f  host mean %5.2f max %5.2f idle %5.2f" % (
    sys.argv[2], r["time_us"], r["vs_floor"], r["host_us"], r["host_us_max"], r["host_idle_us"]))
PY
}
for k in 1 2 3 4; do
  one default-$k MPINCCL_DELEGATE_WAIT_US=50
  one wait0-$k MPINCCL_DELEGATE_WAIT_US=0
done
tar czf $out/res.tgz -C $out $(cd $out && ls *.json *.txt) && rm -f $out/*.json $out/*.txt
echo "done in $((SECONDS-t0)) s"
