#!/usr/bin/env bash
# session 37: per-half kernels of several blocks over two GPUs (one process
# per GPU, kernels at once, no MPS): test_p2p at 2 (whole) and its halo
# steps at 4, test_rma at 2; old (bfe6d61) / new halo at 2 and 4 ranks.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
make -j32 check TESTS= > /dev/null 2>&1
echo "warnings: $(grep -c warning $out/build.log)"; nvidia-smi -L
(rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp && cd /tmp/old && autoreconf -fi && ./configure -q && make -j32) > $out/build-old.log 2>&1 &
flags=$(tests/run-test --mpirun-flags)
step "test_p2p np=2, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=100 MPINCCL_MPIRUN_FLAGS="$flags" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np2.log 2>&1
echo "exit $?"; grep -E "failures|run-test: np|expected" $out/p2p-np2.log | grep -v "done (0 failures" | head -8
step "test_p2p np=4 halo steps, two GPUs"
TEST_P2P_ONLY=halo MPINCCL_TEST_NP=4 MPINCCL_TEST_TIMEOUT=60 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np4.log 2>&1
echo "exit $?"; grep -E "failures|run-test: np" $out/p2p-np4.log | grep -v "done (0 failures" | head -4
step "test_rma np=2, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=60 MPINCCL_MPIRUN_FLAGS="$flags" tests/run-test ./tests/gpu/test_rma > $out/rma-np2.log 2>&1
echo "exit $?"; grep -E "failures|run-test: np" $out/rma-np2.log | tail -2
wait
[ -x /tmp/old/bench/mpinccl_bench ] || { echo "old build failed"; tail -3 $out/build-old.log; exit 1; }
step "old / new halo over two GPUs"
for k in 1 2; do for v in new old; do
  b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
  for cfg in "2 64K" "2 256K" "4 64K"; do
    set -- $cfg
    line=$(timeout 60 mpirun -np $1 $flags $b -o halo -b $2 -e $2 -n 50 -w 10 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   $v np=$1 face=$2 round $k: ${line:-failed}" | tee -a $out/ab.txt
  done
done; done
step done
