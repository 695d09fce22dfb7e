#!/usr/bin/env bash
# Two H200s, 4 processes (two per GPU, no MPS): halo3d --put took 483 us
# against 372 for the two-sided exchange (PERFORMANCE.md, twentieth
# session, known problem 4 on two GPUs).  Which part: the copies' engine,
# the flag kernel, the plain-CUDA exchange, MPS.
set -u
source .device/setup.sh
out=$(mktemp -d)/put4; mkdir -p $out
([ -f Makefile ] || (autoreconf -fi && ./configure -q)) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
h() { # label, env assignment or -, halo3d options
  local label=$1 env=$2; shift 2
  local e=(env) x=()
  [ "$env" = - ] || { e+=("$env"); x=(-x "${env%%=*}"); }
  for k in 1 2; do
    echo "$label $k: $("${e[@]}" timeout 100 mpirun -np 4 $flags "${x[@]}" $MPSX ./examples/halo3d "$@" 2>&1 |
      grep -E 'time/iter|comm/iter|host/iter' | sed 's/  */ /g' | tr '\n' ' ')"
  done
}
run_all() {
  h exchange - ; h put - --put; h flags - --flag-sync; h ipc-exchange - --ipc-exchange
  h put-ce MPINCCL_COPY_KERNEL_MAX=0 --put; h put-memops MPINCCL_KERNEL_SYNC=0 --put
  h exchange-memops MPINCCL_KERNEL_SYNC=0
}
MPSX=""
echo "== no MPS"; run_all | tee $out/nomps.txt
mps_start; sleep 1; MPSX="-x CUDA_MPS_PIPE_DIRECTORY"
echo "== MPS"; run_all | tee $out/mps.txt
mps_stop
tar czf "$OUT/put4.tgz" -C $(dirname $out) put4
