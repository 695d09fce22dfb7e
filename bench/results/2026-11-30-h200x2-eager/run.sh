#!/usr/bin/env bash
# Two H200s: the inbox's small ring between processes on different GPUs
# (one hop for messages up to MPINCCL_EAGER_MAX).  Same job: default
# against MPINCCL_EAGER_MAX=0 (no inbox: the two-hop handshake, as before)
# and NVIDIA's NCCL 2.28 from the same benchmark source; then make check
# with the processes spread over both GPUs.
set -u
source .device/setup.sh
out=$(mktemp -d)/x2e; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
make -C bench nccl NCCL_HOME=/usr > $out/nccl-build.log 2>&1 || tail -5 $out/nccl-build.log
flags=$(tests/run-test --mpirun-flags)
run() { # name, np, env assignment or -, program, bench options
  local name=$1 np=$2 env=$3 prog=$4; shift 4
  step "$name"
  local e=(env) x=()
  [ "$env" = - ] || { e+=("$env"); x=(-x "${env%%=*}"); }
  "${e[@]}" timeout 120 mpirun -np $np $flags "${x[@]}" -x NCCL_DEBUG=WARN $prog "$@" --json $out/$name.json \
    > $out/$name.txt 2>&1
  grep -v "^#" $out/$name.txt | grep -v "^$"
}
for k in 1 2; do
  for op in sendrecv pingpong; do
    run $op-eager$k 2 - ./bench/mpinccl_bench -o $op -b 8 -e 1M -f 8 -n 50 -w 10
    run $op-noeager$k 2 MPINCCL_EAGER_MAX=0 ./bench/mpinccl_bench -o $op -b 8 -e 1M -f 8 -n 50 -w 10
    [ -x bench/mpinccl_bench_nccl ] && run $op-nccl$k 2 - ./bench/mpinccl_bench_nccl -o $op -b 8 -e 1M -f 8 -n 50 -w 10
  done
done
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|SKIP|#)' $out/check.log | tee $out/check-summary.txt
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "push_own rank" tests/gpu/test_p2p.log | tee $out/push-own.txt
tar czf "$OUT/x2e.tgz" -C $(dirname $out) x2e
