#!/usr/bin/env bash
# session 45, call 1: build; halo3d with 2 ranks, both regimes, three interleaved rounds of
# the exchange under path options (two hops by memory operations and the copy engine, never tried
# together under MPS), against the flag-only loop and plain CUDA's shapes.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
one() { # tag env... -- mode
  local tag=$1; shift; local envs=() xs=""
  while [ "$1" != "--" ]; do envs+=("$1"); xs="$xs -x ${1%%=*}"; shift; done; shift
  t=$(env "${envs[@]}" timeout 120 mpirun -np 2 $flags $extra $xs ./examples/halo3d "$@" 2>&1 | tee -a $out/raw.txt |
      sed -n 's|.*time/iter *\([0-9.]*\) us.*|\1|p')
  echo "$reg $tag: ${t:-failed}"
}
rounds() {
  for k in 1 2 3; do
    one default N=1 -- ; one kernel0 MPINCCL_KERNEL_SYNC=0 -- ; one twohop MPINCCL_EAGER_MAX=0 MPINCCL_EAGER_BIG_MAX=0 --
    one twohop-kernel0 MPINCCL_KERNEL_SYNC=0 MPINCCL_EAGER_MAX=0 MPINCCL_EAGER_BIG_MAX=0 --
    one twohop-kernel0-ce MPINCCL_KERNEL_SYNC=0 MPINCCL_EAGER_MAX=0 MPINCCL_EAGER_BIG_MAX=0 MPINCCL_COPY_KERNEL_MAX=0 --
    one flag-only N=1 -- --flag-sync; one ipc-exchange N=1 -- --ipc-exchange
    one copy-out-engine N=1 -- --ipc-copy-out-engine; one put N=1 -- --put
  done
}
reg=nomps extra=""; rounds
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
reg=mps extra="-x CUDA_MPS_PIPE_DIRECTORY"; rounds
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
echo "checks passed: $(grep -c '(PASS)' $out/raw.txt), failed: $(grep -c '(FAIL' $out/raw.txt), skipped: $(grep -c 'check: skipped' $out/raw.txt)"
cd $out && gzip raw.txt
