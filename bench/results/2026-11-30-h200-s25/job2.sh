#!/usr/bin/env bash
# Twenty-fifth session, call 2: finalize and destroy wait for the
# communicator's work (src/core/drain.c).  make check; test_gpu_comm under
# MPS at 2 and 4; then the cost of the per-group event record, A/B against
# the library at 1147341 (built beside, LD_LIBRARY_PATH), interleaved, 3 jobs
# each: 8 B sendrecv (loops of 1000) and the 8-rank halo's calls, both regimes.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
( rm -rf /tmp/old && mkdir -p /tmp/old && tar xf .device/old.tar -C /tmp/old && # git archive 1147341
  cd /tmp/old && autoreconf -fi && ./configure -q && make -j16 libmpinccl.la ) >"$out/old-build.log" 2>&1 &
oldpid=$!
make -j8 check >"$out/check.log" 2>&1
echo "== make check: exit $?"; grep -E "^(FAIL|ERROR)|^# " "$out/check.log"
wait $oldpid; echo "== old library: $(ls /tmp/old/.libs/libmpinccl.so* 2>/dev/null | head -1)"
ab() { # regime label
  local r=$1 k lib line
  for k in 1 2 3; do
    for lib in new old; do
      if [ $lib = old ]; then L=/tmp/old/.libs; else L=$PWD/.libs; fi
      line=$(LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 60 mpirun -np 2 $flags $extra -x LD_LIBRARY_PATH ./bench/.libs/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +8 ' | head -1)
      echo "   $r sendrecv 8B $lib job $k: ${line:-failed}"
      line=$(LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 60 mpirun -np 8 $flags $extra -x LD_LIBRARY_PATH ./bench/.libs/mpinccl_bench -o halo -b 64K -e 64K -n 20 2>&1 | grep -iE 'host|^ +65536 ' | head -3 | tr '\n' ' ')
      echo "   $r halo np8 $lib job $k: ${line:-failed}"
    done
  done | tee "$out/$r-ab.txt"
}
extra=""
ab nomps
mps_start
extra="-x CUDA_MPS_PIPE_DIRECTORY"
MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
  tests/run-test ./tests/gpu/test_gpu_comm >"$out/gpu_comm-mps.log" 2>&1
echo "== test_gpu_comm under MPS at 2 and 4: exit $?"
ab mps
mps_stop
for f in "$out"/*.log; do grep -E 'np=.*(FAIL|timed)|wrong|expected' "$f" | head -5 | sed "s|^|$(basename $f): |"; done
