#!/usr/bin/env bash
# session 37: captured messages through their graph slot's inbox over two
# GPUs (one process per GPU): test_p2p whole at 2, graph steps at 4;
# captured sendrecv with MPINCCL_EAGER_GRAPH 0 / 1.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"; nvidia-smi -L
flags=$(tests/run-test --mpirun-flags)
step "test_p2p np=2 whole, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=100 MPINCCL_MPIRUN_FLAGS="$flags -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=P2P" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np2.log 2>&1
echo "exit $?"; grep -E "run-test: np" $out/p2p-np2.log; grep -o "[0-9]* captured through their graph slots' inbox" $out/p2p-np2.log | sort | uniq -c
step "test_p2p np=4 graph steps, two GPUs"
TEST_P2P_ONLY=graph MPINCCL_TEST_NP=4 MPINCCL_TEST_TIMEOUT=60 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np4.log 2>&1
echo "exit $?"; grep -E "run-test: np" $out/p2p-np4.log
for v in 0 1 0 1; do
  timeout 40 mpirun -np 2 $flags -x MPINCCL_EAGER_GRAPH=$v ./bench/mpinccl_bench -o sendrecv -b 8 -e 4K -f 8 -n 100 -w 10 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/   v$v /" | tee -a $out/ab.txt
done
step done
