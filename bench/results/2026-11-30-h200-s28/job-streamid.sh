#!/usr/bin/env bash
# Twenty-eighth session: each stream's id asked once per group (in
# ncclGroupEnd's checks) instead of twice.  Builds the change and, from
# stream-id.patch reversed, the code before it; make check's GPU tests and
# test_p2p / test_rma under MPS at 2 with the change; then the 8 B
# sendrecv under MPS, the two libraries interleaved, 4 runs each.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
p=bench/results/2026-11-30-h200-s28/stream-id.patch
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
b() { make -j16 >>"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }; }
patch -R -p1 -s < $p && b && mkdir -p /tmp/libold && cp -a .libs/libmpinccl.so* /tmp/libold/
patch -p1 -s < $p && b && mkdir -p /tmp/libnew && cp -a .libs/libmpinccl.so* /tmp/libnew/
echo "== make check, GPU tests"
MPINCCL_TEST_TIMEOUT=120 make -j4 check TESTS="tests/gpu/test_gpu_comm tests/gpu/test_p2p tests/gpu/test_rma tests/gpu/launch_ring.sh tests/gpu/launch_halo3d.sh" >"$out/check.log" 2>&1
grep -E '^(PASS|FAIL|ERROR|#)' "$out/check.log"
flags=$(tests/run-test --mpirun-flags)
mps_start
for t in test_p2p test_rma; do
  MPINCCL_TEST_NP=2 MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$t >"$out/$t-mps.log" 2>&1
  echo "== $t under MPS at 2: exit $?"; grep -E "ranks, " "$out/$t-mps.log"
done
for k in 1 2 3 4; do
  for lib in old new; do
    LD_LIBRARY_PATH=/tmp/lib$lib:$LD_LIBRARY_PATH timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY -x LD_LIBRARY_PATH \
      ./bench/.libs/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +8 ' | sed "s/^/   $lib run $k: /"
  done
done
mps_stop
