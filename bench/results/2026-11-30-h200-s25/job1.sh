#!/usr/bin/env bash
# Twenty-fifth session, call 1: examples/halo3d --overlap (the sweep's inner
# cells on a second stream while the faces move, then the shell).  The
# launch_halo3d test (every mode at 1, 2 and 4 ranks, bitwise check against
# a one-block run), a mutation (the shell leaves out one slab: the check must
# fail), then per regime, 2 and 4 ranks, 3 interleaved runs of each loop:
# serial and overlapped, exchange / --put / --flag-sync / plain CUDA's
# --ipc-copy-out-engine.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
tests/run-test tests/gpu/launch_halo3d.sh >"$out/launch_halo3d.log" 2>&1
echo "== launch_halo3d: exit $?"; grep -c PASS "$out/launch_halo3d.log"; grep -E "FAIL" "$out/launch_halo3d.log" | head
# Mutation: the shell kernel skips its last slab (+x plane).
cp examples/halo3d_kernels.cu /tmp/k.cu
sed -i 's|cell_range r = s.slab\[blockIdx.y\];|cell_range r = s.slab[blockIdx.y]; if (blockIdx.y == HALO_FACES - 1) return;|' examples/halo3d_kernels.cu
make -j16 examples/halo3d >/dev/null 2>&1
timeout 60 mpirun -np 2 $flags ./examples/halo3d -n 40,36,32 -i 5 -w 1 --overlap 2>&1 | grep check | sed 's/^/   mutated shell: /'
cp /tmp/k.cu examples/halo3d_kernels.cu; touch examples/halo3d_kernels.cu
make -j16 examples/halo3d >/dev/null 2>&1
runs() { # regime
  local r=$1 np k mode t
  for np in 2 4; do
    for k in 1 2 3; do
      for mode in exchange --put --flag-sync --ipc-copy-out-engine "--overlap" "--overlap --put" "--overlap --flag-sync" "--overlap --ipc-copy-out-engine"; do
        t=$(timeout 60 mpirun -np $np $flags $extra ./examples/halo3d --no-check ${mode#exchange} 2>&1 |
          sed -n 's|.*time/iter *\([0-9.]*\) us.*|\1|p')
        echo "   $r np$np $mode run $k: ${t:-failed} us"
      done
    done
  done | tee "$out/$r-halo3d.txt"
}
extra=""
runs nomps
mps_start
extra="-x CUDA_MPS_PIPE_DIRECTORY"
runs mps
timeout 60 mpirun -np 4 $flags $extra ./examples/halo3d --overlap 2>&1 | grep -E 'iter|check' | sed 's/^/   mps np4 overlap checked: /'
mps_stop
