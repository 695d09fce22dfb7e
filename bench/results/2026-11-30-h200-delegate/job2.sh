#!/usr/bin/env bash
# Twenty-third session, second call: the 8 B sendrecv in loops of 100 (as
# run-device.sh's 5-job repeats ran it) against loops of 1000 (as the
# floors time their exchanges: 1000 a loop, best of 3), interleaved, without
# MPS and under MPS.  Usage: job2.sh OUTDIR
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
jobs() { # regime extra-flags
  for k in 1 2 3 4 5; do
    for n in "100 -w 10" "1000 -w 100"; do
      line=$(timeout 60 mpirun -np 2 $flags $2 ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n $n 2>&1 |
        grep -E '^ +8 ' | head -n 1)
      echo "   $1 -n ${n%% *} job $k: ${line:-failed}"
    done
  done
}
jobs mps-off "" | tee "$out/loops.txt"
mps_start
jobs mps-on "-x CUDA_MPS_PIPE_DIRECTORY" | tee -a "$out/loops.txt"
mps_stop
