#!/usr/bin/env bash
# session 36: the final source over two GPUs (one process per GPU: kernels
# run at once, no MPS): test_p2p at 2 (whole) and 4 (graph steps), test_rma
# at 2, captured sendrecv and all-to-all timings.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
make -j32 check TESTS= > /dev/null 2>&1
echo "warnings: $(grep -c warning $out/build.log)"; nvidia-smi -L
flags=$(tests/run-test --mpirun-flags)
step "test_p2p np=2, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=100 MPINCCL_MPIRUN_FLAGS="$flags" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np2.log 2>&1
echo "exit $?"; grep -E "failures|run-test: np|expected" $out/p2p-np2.log | grep -v "done (0 failures" | head -8
step "test_p2p np=4 graph and halo steps, two GPUs"
TEST_P2P_ONLY=halo MPINCCL_TEST_NP=4 MPINCCL_TEST_TIMEOUT=60 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np4.log 2>&1
echo "exit $?"; grep -E "failures|run-test: np" $out/p2p-np4.log | grep -v "done (0 failures" | head -4
step "test_rma np=2, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=60 MPINCCL_MPIRUN_FLAGS="$flags" tests/run-test ./tests/gpu/test_rma > $out/rma-np2.log 2>&1
echo "exit $?"; grep -E "failures|run-test: np" $out/rma-np2.log | tail -2
timeout 40 mpirun -np 2 $flags ./bench/mpinccl_bench -o sendrecv -b 8 -e 2M -f 8 -n 100 -w 10 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ |GPU" | sed "s/^/sendrecv-G /" | tee -a $out/t.txt
timeout 40 mpirun -np 2 $flags ./bench/mpinccl_bench -o alltoall -b 64K -e 4M -f 8 -n 20 -w 5 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/a2a /" | tee -a $out/t.txt
timeout 40 mpirun -np 2 $flags ./bench/mpinccl_bench -o alltoall -b 64K -e 4M -f 8 -n 20 -w 5 -c 1 -G 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/a2a-G /" | tee -a $out/t.txt
step done
