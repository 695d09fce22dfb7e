#!/usr/bin/env bash
# scratch: first run on two GPUs
set -u
source .device/setup.sh
out=/tmp/x2; rm -rf $out; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
nvidia-smi -L > $out/gpus.txt; nvidia-smi topo -m >> $out/gpus.txt 2>&1; cat $out/gpus.txt
step configure
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
step build
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; }
make -C bench nccl NCCL_HOME=/usr > $out/nccl-build.log 2>&1 || tail -5 $out/nccl-build.log
step ring
for a in "" "-r 4" "-r 3 -c 1000001 -i 7" "-c 67108864 -i 20" "-r 4 -c 67108864 -i 20"; do
  echo "-- ring $a"; timeout 100 ./examples/ring $a 2>&1 | tail -4
done | tee $out/ring.txt
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(PASS|FAIL|SKIP|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
flags=$(tests/run-test --mpirun-flags)
step bench
for op in sendrecv pingpong put putpingpong; do
  timeout 100 mpirun -np 2 $flags ./bench/mpinccl_bench -o $op -b 8 -e 1G -f 8 -n 20 -w 5 --json $out/x2-$op.json > $out/x2-$op.txt 2>&1 || echo "($op exit $?)"
  grep -v "^#" $out/x2-$op.txt | tail -n 12
done
for op in sendrecv pingpong; do
  timeout 100 mpirun -np 2 $flags -x NCCL_DEBUG=WARN ./bench/mpinccl_bench_nccl -o $op -b 8 -e 1G -f 8 -n 20 -w 5 --json $out/nccl-$op.json > $out/nccl-$op.txt 2>&1 || echo "(nccl $op exit $?)"
  grep -v "^#" $out/nccl-$op.txt | tail -n 12
done
step halo3d
for np in 2 4; do for mode in "" --put --flag-sync; do
  echo "halo3d np$np ${mode:-exchange}: $(timeout 100 mpirun -np $np $flags ./examples/halo3d $mode 2>&1 | grep -E 'time/iter|check' | tr '\n' ' ')"
done; done | tee $out/halo3d.txt
tar czf "$OUT/x2.tgz" -C /tmp x2
