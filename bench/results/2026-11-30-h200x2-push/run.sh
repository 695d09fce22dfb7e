#!/usr/bin/env bash
# Two H200s, each side pushing its own large sends (src/p2p/push.c): the
# sendrecv sweep with the rule (default) and without it
# (MPINCCL_PUSH_WAIT_US=0, the behaviour before) in the same job, around
# MPINCCL_PUSH_MIN and up to 1 GiB, in graph mode, a 4-rank all-to-all,
# beside the plain-CUDA floors of bench/mpinccl_ipc_copies; then make check
# with the processes spread over both GPUs.
set -u
source .device/setup.sh
out=$(mktemp -d)/x2p; mkdir -p $out
step() { echo "== $(date +%T) $*"; }
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
step build
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader > $out/gpus.txt; cat $out/gpus.txt
flags=$(tests/run-test --mpirun-flags)
step ipc_copies
timeout 60 mpirun -np 2 $flags ./bench/mpinccl_ipc_copies 2>&1 | tee $out/ipc-copies.txt
run() { # name, np, env assignment or -, bench options
  local name=$1 np=$2 env=$3; shift 3
  step "$name"
  local e=(env) x=()
  [ "$env" = - ] || { e+=("$env"); x=(-x "${env%%=*}"); }
  "${e[@]}" timeout 120 mpirun -np $np $flags "${x[@]}" -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=P2P \
    ./bench/mpinccl_bench "$@" --json $out/$name.json > $out/$name.txt 2>&1
  grep -v "NCCL INFO\|mpinccl INFO" $out/$name.txt | grep -v "^#  \|^# [a-z]" ; grep -h "sends pushed" $out/$name.txt | sed 's/.*ran out; [0-9]* gaps.*us; /  /'
}
for k in 1 2; do
  run sendrecv-small-push$k 2 - -o sendrecv -b 1M -e 4M -f 2 -n 20 -w 5
  run sendrecv-small-nopush$k 2 MPINCCL_PUSH_WAIT_US=0 -o sendrecv -b 1M -e 4M -f 2 -n 20 -w 5
done
run sendrecv-push 2 - -o sendrecv -b 1M -e 1G -f 4 -n 10 -w 3
run sendrecv-nopush 2 MPINCCL_PUSH_WAIT_US=0 -o sendrecv -b 1M -e 1G -f 4 -n 10 -w 3
run sendrecv-graph-push 2 - -o sendrecv -b 1M -e 1G -f 4 -n 10 -w 3 -G 1
run alltoall-push 4 - -o alltoall -b 1M -e 256M -f 4 -n 10 -w 3
run alltoall-nopush 4 MPINCCL_PUSH_WAIT_US=0 -o alltoall -b 1M -e 256M -f 4 -n 10 -w 3
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|SKIP|#)' $out/check.log | tee $out/check-summary.txt
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "push_own" tests/gpu/test_p2p.log | tee $out/push-own.txt
tar czf "$OUT/x2p.tgz" -C $(dirname $out) x2p
