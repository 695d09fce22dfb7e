#!/usr/bin/env bash
# session 37 call 2: builds the tests; MPS: test_p2p halo steps at 2 4 8 and
# test_p2p whole at 8 and 2; no MPS: halo steps at 8 and 2; no MPS: old/new halo
out=$1
step() { echo "== $(date +%T) $*"; }
step build; [ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
run_p2p() { # log np only [extra mpirun flags]
  local log=$1 np=$2 only=$3; shift 3
  TEST_P2P_ONLY=$only MPINCCL_TEST_NP="$np" MPINCCL_MPIRUN_FLAGS="$flags $* -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/$log 2>&1; echo "exit $?"
  grep -E "np=.*(PASS|FAIL)" $out/$log
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p halo steps at 2 4 8"; run_p2p p2p-halo-mps.log "2 4 8" halo $x
step "MPS: test_p2p whole at 8 2"; run_p2p p2p-mps.log "8 2" "" $x
echo quit | nvidia-cuda-mps-control; sleep 1
step "no MPS: test_p2p halo steps at 8 2"; run_p2p p2p-halo.log "8 2" halo
step "no MPS: old / new 8-rank halo 64 KiB"
for k in 1 2; do for v in new old; do
  b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
  line=$(timeout 60 mpirun -np 8 $flags $b -o halo -b 64K -e 64K -n 20 -w 5 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
  echo "   $v round $k: ${line:-failed}" | tee -a $out/ab-nomps.txt
done; done
step done
