#!/usr/bin/env bash
# session 35: captured messages through the flag kernel under MPS
out=$1
step() { echo "== $(date +%T) $*"; }
step configure; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
step build; make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
make -j32 check TESTS= > /dev/null 2>&1
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p at 1 2 3 4 8"
MPINCCL_TEST_NP="1 2 3 4 8" MPINCCL_MPIRUN_FLAGS="$flags $x" tests/run-test ./tests/gpu/test_p2p > $out/p2p-mps.log 2>&1; echo "exit $?"
grep -E "failures|np=.*(PASS|FAIL)|graph" $out/p2p-mps.log | grep -v "done (0" | head -20
grep -c "graph.*done (0 failures" $out/p2p-mps.log
step "MPS: test_rma at 2 4 (graph steps too)"
MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags $x" tests/run-test ./tests/gpu/test_rma > $out/rma-mps.log 2>&1; echo "exit $?"
grep -E "failures|np=.*(PASS|FAIL)" $out/rma-mps.log
step "MPS: graph-mode sendrecv (-G 1), twice, and the same sizes without graphs"
for k in 1 2; do timeout 60 mpirun -np 2 $flags $x ./bench/mpinccl_bench -o sendrecv -b 8 -e 256K -f 8 -n 200 -w 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ |floor" | tee -a $out/graph-mps.txt; done
timeout 60 mpirun -np 2 $flags $x ./bench/mpinccl_bench -o sendrecv -b 8 -e 256K -f 8 -n 200 -w 20 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | tee -a $out/nograph-mps.txt
step "MPS: graph-mode halo, 8 ranks"
timeout 60 mpirun -np 8 $flags $x ./bench/mpinccl_bench -o halo -b 64K -e 64K -n 20 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | tee -a $out/graph-mps.txt
step "MPS: the fault test (a killed peer, a captured graph replayed after the release)"
tests/gpu/fault_launch.sh test_fault_ipc MPINCCL_WATCHDOG_MS=200 CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY > $out/fault-mps.log 2>&1; echo "exit $?"; tail -3 $out/fault-mps.log
echo quit | nvidia-cuda-mps-control; sleep 1
step "no MPS: graph-mode sendrecv (unchanged path)"
timeout 60 mpirun -np 2 $flags ./bench/mpinccl_bench -o sendrecv -b 8 -e 256K -f 8 -n 100 -w 10 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | tee -a $out/graph-nomps.txt
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
step done
