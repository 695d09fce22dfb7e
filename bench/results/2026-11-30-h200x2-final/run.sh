#!/usr/bin/env bash
# Two H200s at the session's last code: make check with the processes
# spread over both GPUs (the abort and fault tests release flags through
# mpn_p2p_release_peer, changed last), then one sendrecv sweep.
set -u
source .device/setup.sh
out=$(mktemp -d)/x2f; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|SKIP|#)' $out/check.log | tee $out/check-summary.txt
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "push_own rank" tests/gpu/test_p2p.log | tee $out/push-own.txt
grep -h "np=.*PASS\|np=.*FAIL" tests/gpu/launch_abort_ipc.sh.log tests/gpu/launch_fault_ipc.sh.log | tee $out/fault-abort.txt
step sendrecv
timeout 100 mpirun -np 2 $flags ./bench/mpinccl_bench -o sendrecv -b 8 -e 1G -f 8 -n 20 -w 5 --json $out/sendrecv.json \
  > $out/sendrecv.txt 2>&1
grep -v "^#" $out/sendrecv.txt | grep -v "^$"
tar czf "$OUT/x2f.tgz" -C $(dirname $out) x2f
