#!/usr/bin/env bash
# Twenty-fifth session, call 6 (the last of the device budget): finalize
# words in device memory.  test_gpu_comm at 1, 2 and 4 and test_rma at 2
# without MPS; under MPS test_gpu_comm at 2 and 4, test_p2p and test_rma at
# 2 and 4; then 8 B sendrecv and put ping-pong under MPS, 4 interleaved jobs
# each, against the library at 1147341 (old).
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_gpu_comm tests/gpu/test_rma tests/gpu/test_p2p >>"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
( rm -rf /tmp/old && mkdir -p /tmp/old && tar xf .device/old.tar -C /tmp/old &&
  cd /tmp/old && autoreconf -fi && ./configure -q && make -j16 libmpinccl.la ) >"$out/old-build.log" 2>&1 &
flags=$(tests/run-test --mpirun-flags)
t() { # label np-list test [mps]
  MPINCCL_TEST_NP="$2" MPINCCL_MPIRUN_FLAGS="$flags ${4:-}" tests/run-test ./tests/gpu/$3 >"$out/$1.log" 2>&1
  echo "== $1 ($3 at $2): exit $?"
}
t gpu_comm "1 2 4" test_gpu_comm
TEST_RMA_ONLY=ping t rma "2" test_rma
grep -h "finalize marks" "$out/gpu_comm.log" | sort | uniq -c
mps_start
x="-x CUDA_MPS_PIPE_DIRECTORY"
t gpu_comm-mps "2 4" test_gpu_comm "$x"
grep -h "finalize marks" "$out/gpu_comm-mps.log" | sort | uniq -c
t p2p-mps "2 4" test_p2p "$x"
t rma-mps "2 4" test_rma "$x"
wait
for k in 1 2 3 4; do
  for lib in new old; do
    L=$PWD/.libs; [ $lib = old ] && L=/tmp/old/.libs
    for op in sendrecv putpingpong; do
      line=$(LD_LIBRARY_PATH=$L:$LD_LIBRARY_PATH timeout 30 mpirun -np 2 $flags $x -x LD_LIBRARY_PATH ./bench/.libs/mpinccl_bench -o $op -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +8 ' | head -1)
      echo "   mps $op 8B $lib job $k: ${line:-failed}"
    done
  done
done | tee "$out/mps-ab.txt"
mps_stop
for f in "$out"/*.log; do grep -E 'np=.*(FAIL|timed)|wrong|expected' "$f" | head -5 | sed "s|^|$(basename $f): |"; done
