#!/usr/bin/env bash
# Twenty-fifth session, call 4: do the finalize marks cost the flag kernel's
# early launch?  8 B sendrecv under MPS, 4 interleaved jobs each: marks or
# none (job3's variants), with MPINCCL_KERNEL_SYNC_EARLY=1 (default) and 0.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
if [ ! -d /tmp/nomark ]; then
  ( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
  make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
  mkdir -p /tmp/mark; cp -a .libs/libmpinccl.so* /tmp/mark/
  cp src/core/group.c /tmp/keep.c
  sed -i 's|if (!op->capturing) mpn_drain_mark(op->comm, op->stream);|(void)0;|' src/core/group.c
  make -j16 libmpinccl.la >/dev/null 2>&1; mkdir -p /tmp/nomark; cp -a .libs/libmpinccl.so* /tmp/nomark/
  cp /tmp/keep.c src/core/group.c; touch src/core/group.c; make -j16 libmpinccl.la >/dev/null 2>&1
fi
flags=$(tests/run-test --mpirun-flags)
mps_start
for k in 1 2 3 4; do
  for early in 1 0; do
    for lib in mark nomark; do
      line=$(MPINCCL_KERNEL_SYNC_EARLY=$early LD_LIBRARY_PATH=/tmp/$lib:$LD_LIBRARY_PATH timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY -x LD_LIBRARY_PATH -x MPINCCL_KERNEL_SYNC_EARLY ./bench/.libs/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +8 ' | head -1)
      echo "   mps 8B early=$early $lib job $k: ${line:-failed}"
    done
  done
done | tee "$out/mps-8B-early.txt"
mps_stop
