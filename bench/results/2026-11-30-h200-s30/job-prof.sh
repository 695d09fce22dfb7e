#!/usr/bin/env bash
# scratch: host time per phase of ncclGroupEnd, 8 B sendrecv, MPS and not
set -u
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) > /tmp/build.log 2>&1
make -j16 >> /tmp/build.log 2>&1 || { tail -20 /tmp/build.log; exit 1; }
make -j16 -C bench >> /tmp/build.log 2>&1 || true
ls bench/mpinccl_bench || { tail -20 /tmp/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
for regime in mps nomps; do
  x=""
  if [ $regime = mps ]; then mps_start; x="-x CUDA_MPS_PIPE_DIRECTORY"; fi
  for k in 1 2; do
    echo "== $regime run $k"
    MPN_PROFILE=1 timeout 60 mpirun -np 2 $flags $x -x MPN_PROFILE ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 3000 -w 100 2>&1 | grep -E "^ +8 |prof|floor"
  done
  [ $regime = mps ] && mps_stop
done
