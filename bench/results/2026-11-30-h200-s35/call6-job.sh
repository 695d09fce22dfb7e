#!/usr/bin/env bash
# session 35: captured groups through the flag kernel between two GPUs
out=$1
step() { echo "== $(date +%T) $*"; }
step "build new"; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
make -j32 check TESTS= > /dev/null 2>&1
echo "warnings: $(grep -c warning $out/build.log)"
step "build old"; rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp
(cd /tmp/old && autoreconf -fi && ./configure -q && make -j32) > $out/build-old.log 2>&1 || { tail -20 $out/build-old.log; exit 1; }
nvidia-smi -L
flags=$(tests/run-test --mpirun-flags)
for np in 2 4; do
  step "test_p2p np=$np, two GPUs"
  MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=150 MPINCCL_MPIRUN_FLAGS="$flags" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np$np.log 2>&1
  echo "exit $?"; grep -E "failures|run-test: np|expected" $out/p2p-np$np.log | grep -v "done (0 failures" | head -8
done
step "test_rma np=2, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=90 MPINCCL_MPIRUN_FLAGS="$flags" tests/run-test ./tests/gpu/test_rma > $out/rma-np2.log 2>&1
echo "exit $?"; grep -E "failures|run-test: np" $out/rma-np2.log | tail -2
for k in 1 2; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    timeout 60 mpirun -np 2 $flags $b -o sendrecv -b 8 -e 256K -f 8 -n 200 -w 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ |GPU" | sed "s/^/$v 2gpu sendrecv-G /" | tee -a $out/ab-2gpu.txt
  done
done
timeout 60 mpirun -np 2 $flags ./bench/mpinccl_bench -o sendrecv -b 8 -e 256K -f 8 -n 200 -w 20 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/new 2gpu sendrecv /" | tee -a $out/ab-2gpu.txt
step done
