#!/usr/bin/env bash
# Two H200s: each side pushes its own large sends (src/p2p/push.c).  The
# same build measures the sendrecv sweep with the rule (default) and
# without it (MPINCCL_PUSH_WAIT_US=0, the behaviour before), beside the
# plain-CUDA floors of bench/mpinccl_ipc_copies, then runs make check with
# the processes spread over both GPUs.  Ran at c6067cd (MPINCCL_PUSH_MIN 1 MiB,
# waits skipped after one ran out): test_p2p push_own failed at 2 and 3
# processes (failed-test_p2p.log), fixed in the next commit.
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
sweep() { # name, env assignment (or -), extra bench options
  local name=$1 env=$2; shift 2
  step "sendrecv $name"
  if [ "$env" = - ]; then
    timeout 120 mpirun -np 2 $flags -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=P2P ./bench/mpinccl_bench -o sendrecv \
      -b 64K -e 1G -f 4 -n 10 -w 3 --json $out/sendrecv-$name.json "$@" > $out/sendrecv-$name.txt 2>&1
  else
    env "$env" timeout 120 mpirun -np 2 $flags -x "${env%%=*}" -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=P2P \
      ./bench/mpinccl_bench -o sendrecv -b 64K -e 1G -f 4 -n 10 -w 3 --json $out/sendrecv-$name.json "$@" \
      > $out/sendrecv-$name.txt 2>&1
  fi
  grep -v "^#\|NCCL INFO\|mpinccl INFO" $out/sendrecv-$name.txt; grep -h "sends pushed" $out/sendrecv-$name.txt | sed 's/.*rank/rank/'
}
sweep push -
sweep nopush MPINCCL_PUSH_WAIT_US=0
sweep push-graph - -G 1
sweep push2 -
sweep nopush2 MPINCCL_PUSH_WAIT_US=0
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|SKIP|#)' $out/check.log | tee $out/check-summary.txt
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "push_own" tests/gpu/test_p2p.log | head -5
tar czf "$OUT/x2p.tgz" -C $(dirname $out) x2p
