#!/usr/bin/env bash
set -u
source .device/setup.sh
out=$(mktemp -d)/x2c; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
step build
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
git log --oneline -1 2>/dev/null > $out/commit.txt
step peer_copies
./bench/mpinccl_peer_copies | tee $out/peer-copies.txt
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|SKIP|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
flags=$(tests/run-test --mpirun-flags)
step "sendrecv, default"
timeout 100 mpirun -np 2 $flags ./bench/mpinccl_bench -o sendrecv -b 16M -e 1G -f 4 -n 10 -w 3 > $out/sendrecv.txt 2>&1; grep -v "^#" $out/sendrecv.txt
step "sendrecv, MPINCCL_KERNEL_SYNC=2147483648 (copies in the flag kernel)"
MPINCCL_KERNEL_SYNC=2147483648 timeout 100 mpirun -np 2 $flags -x MPINCCL_KERNEL_SYNC ./bench/mpinccl_bench -o sendrecv -b 16M -e 1G -f 4 -n 10 -w 3 > $out/sendrecv-ks.txt 2>&1; grep -v "^#" $out/sendrecv-ks.txt
tar czf "$OUT/x2c.tgz" -C $(dirname $out) x2c
