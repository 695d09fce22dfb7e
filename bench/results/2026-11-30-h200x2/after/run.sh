#!/usr/bin/env bash
set -u
source .device/setup.sh
out=/tmp/x2b; rm -rf $out; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
step build
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
step bench
for op in sendrecv pingpong alltoall; do
  timeout 100 mpirun -np 2 $flags ./bench/mpinccl_bench -o $op -b 8 -e 1G -f 8 -n 20 -w 5 --json $out/x2-$op.json > $out/x2-$op.txt 2>&1 || echo "($op exit $?)"
  echo "-- $op"; grep -v "^#" $out/x2-$op.txt | tail -n 11
done
step halo3d
for np in 2; do for mode in "" --put --flag-sync "" --flag-sync; do
  echo "halo3d np$np ${mode:-exchange}: $(timeout 100 mpirun -np $np $flags ./examples/halo3d $mode 2>&1 | grep -E 'time/iter|check' | tr '\n' ' ')"
done; done | tee $out/halo3d.txt
step ring
for a in "-c 67108864 -i 20" "-r 4 -c 67108864 -i 20" "-c 1024 -i 200"; do echo "-- ring $a"; timeout 100 ./examples/ring $a 2>&1 | tail -2; done | tee $out/ring.txt
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(PASS|FAIL|SKIP|ERROR|#)' $out/check.log | grep -v "^PASS"
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
tar czf "$OUT/x2b.tgz" -C /tmp x2b
