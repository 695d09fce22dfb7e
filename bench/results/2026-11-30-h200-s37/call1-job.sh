#!/usr/bin/env bash
# session 37 call 1: per-half kernels of several blocks for launches not
# captured (one stream, a half's copies beyond one block's bound), against
# bfe6d61 (/tmp/old).  Build both; MPS: test_p2p halo steps at 2 4 8, a
# trace of the wide halo's kernels; interleaved old/new halos; no MPS: halo steps.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
if [ ! -x /tmp/old/bench/mpinccl_bench ]; then
  step "build old"; rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp
  (cd /tmp/old && autoreconf -fi && ./configure -q && make -j32) > $out/build-old.log 2>&1 || { tail -5 $out/build-old.log; exit 1; }
fi
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p halo steps at 2 4 8"
TEST_P2P_ONLY=halo MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-halo-mps.log 2>&1; echo "exit $?"
grep -E "np=.*(PASS|FAIL)|FAIL|halo" $out/p2p-halo-mps.log | head -20
step "MPS: trace of the 8-rank bench halo (64 KiB), kernels by blocks"
timeout 60 mpirun -np 8 $flags $x -x NCCL_DEBUG=TRACE -x NCCL_DEBUG_SUBSYS=P2P ./bench/mpinccl_bench -o halo -b 64K -e 64K -n 5 -w 1 > $out/trace.log 2>&1
grep -o "flag kernel of [0-9]* flags, [0-9]* copies, [0-9]* blocks" $out/trace.log | sort | uniq -c | sort -rn | head
step "MPS: old / new interleaved halos"
for k in 1 2 3 4; do
  for v in new old; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    for cfg in "8 64K" "8 256K" "4 256K"; do
      set -- $cfg
      line=$(timeout 60 mpirun -np $1 $flags $x $b -o halo -b $2 -e $2 -n 50 -w 10 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
      echo "   $v np=$1 face=$2 round $k: ${line:-failed}" | tee -a $out/ab.txt
    done
  done
done
echo quit | nvidia-cuda-mps-control; sleep 1
step "no MPS: test_p2p halo steps at 8"
TEST_P2P_ONLY=halo MPINCCL_TEST_NP="8" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-halo.log 2>&1; echo "exit $?"
grep -E "np=.*(PASS|FAIL)" $out/p2p-halo.log
step done
