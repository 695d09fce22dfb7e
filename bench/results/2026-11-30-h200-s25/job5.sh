#!/usr/bin/env bash
# Twenty-fifth session, call 5: finalize marks carried by the flag kernel.
# make check; under MPS test_gpu_comm at 2 and 4 (its 4 KiB cases take the
# kernel's mark), test_p2p and test_rma at 2, 4 and 8; then, 5 interleaved
# jobs each, against the library at 1147341 (old): 8 B sendrecv (loops of
# 1000) in both regimes, and under MPS put ping-pong and the 8-rank barrier.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
( [ -f /tmp/old/.libs/libmpinccl.so ] || { rm -rf /tmp/old && mkdir -p /tmp/old && tar xf .device/old.tar -C /tmp/old &&
  cd /tmp/old && autoreconf -fi && ./configure -q && make -j16 libmpinccl.la; } ) >"$out/old-build.log" 2>&1 &
oldpid=$!
flags=$(tests/run-test --mpirun-flags)
make -j8 check >"$out/check.log" 2>&1
echo "== make check: exit $?"; grep -E "^(FAIL|ERROR)|^# " "$out/check.log"
grep -h "finalize marks" tests/gpu/test_gpu_comm.log | sort | uniq -c | head -20
wait $oldpid
mps_start
x="$flags -x CUDA_MPS_PIPE_DIRECTORY"
MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$x" tests/run-test ./tests/gpu/test_gpu_comm >"$out/gpu_comm-mps.log" 2>&1
echo "== test_gpu_comm under MPS at 2 and 4: exit $?"; grep -h "finalize marks" "$out/gpu_comm-mps.log" | sort | uniq -c
MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$x" tests/run-test ./tests/gpu/test_p2p >"$out/p2p-mps.log" 2>&1
echo "== test_p2p under MPS at 2, 4, 8: exit $?"
MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$x" tests/run-test ./tests/gpu/test_rma >"$out/rma-mps.log" 2>&1
echo "== test_rma under MPS at 2, 4, 8: exit $?"
ab() { # regime np label bench-args...
  local r=$1 np=$2 label=$3; shift 3
  for k in 1 2 3 4 5; do
    for lib in new old; do
      L=$PWD/.libs; [ $lib = old ] && L=/tmp/old/.libs
      line=$(LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 60 mpirun -np $np $flags $extra -x LD_LIBRARY_PATH ./bench/.libs/mpinccl_bench "$@" 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -1)
      echo "   $r $label $lib job $k: ${line:-failed}"
    done
  done | tee -a "$out/$r-ab.txt"
}
extra="-x CUDA_MPS_PIPE_DIRECTORY"
ab mps 2 sendrecv-8B -o sendrecv -b 8 -e 8 -n 1000 -w 100
ab mps 2 putpingpong-8B -o putpingpong -b 8 -e 8 -n 1000 -w 100
ab mps 8 barrier-np8 -o barrier -n 1000 -w 100
mps_stop
extra=""
ab nomps 2 sendrecv-8B -o sendrecv -b 8 -e 8 -n 1000 -w 100
for f in "$out"/*.log; do grep -E 'np=.*(FAIL|timed)|wrong|expected' "$f" | head -5 | sed "s|^|$(basename $f): |"; done
