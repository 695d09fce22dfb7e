#!/usr/bin/env bash
# session 38, two GPUs: graph slots' inbox on by default.  One process per
# GPU: test_p2p whole, test_rma whole, test_fault_ipc, test_abort (graph
# mode); MPS with 4 ranks (2 per GPU): test_p2p graph steps; captured timings
# with MPINCCL_EAGER_GRAPH 0 / 1 (2 ranks sendrecv; MPS 4 ranks halo and all-to-all).
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"; nvidia-smi -L
flags=$(tests/run-test --mpirun-flags)
step "test_p2p np=2 whole, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=100 MPINCCL_MPIRUN_FLAGS="$flags -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=P2P" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np2.log 2>&1
echo "exit $?"; grep -E "run-test: np" $out/p2p-np2.log; grep -o "[0-9]* captured through their graph slots' inbox" $out/p2p-np2.log | sort | uniq -c
step "test_rma np=2 whole, two GPUs"
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=100 tests/run-test ./tests/gpu/test_rma > $out/rma-np2.log 2>&1; echo "exit $?"; grep -E "run-test: np" $out/rma-np2.log
step "fault and abort, two GPUs"
for f in "test_fault_ipc MPINCCL_WATCHDOG_MS=200" test_abort "test_abort TEST_ABORT_WAIT=graph" "test_abort TEST_ABORT_WAIT=graph MPINCCL_KERNEL_SYNC=0"; do
  tests/gpu/fault_launch.sh $f > $out/fault.tmp 2>&1
  echo "   $f: exit $? :: $(grep -h -E 'test_(abort|fault_ipc):' $out/fault.tmp | cut -c1-330)"; cat $out/fault.tmp >> $out/fault.log
done
for v in 0 1 0 1; do
  timeout 40 mpirun -np 2 $flags -x MPINCCL_EAGER_GRAPH=$v ./bench/mpinccl_bench -o sendrecv -b 8 -e 4K -f 8 -n 100 -w 10 -G 1 -c 1 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | sed "s/^/   v$v /" | tee -a $out/ab.txt
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS: test_p2p np=4 graph steps, two GPUs"
TEST_P2P_ONLY=graph MPINCCL_TEST_NP=4 MPINCCL_TEST_TIMEOUT=60 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_P2P_ONLY -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np4.log 2>&1
echo "exit $?"; grep -E "run-test: np" $out/p2p-np4.log
step "MPS: captured 4 ranks over two GPUs, EAGER_GRAPH 0 / 1"
for k in 1 2; do for g in 1 0; do
  for cfg in "4 halo 64K" "4 halo 4K" "4 alltoall 4K"; do
    set -- $cfg
    line=$(MPINCCL_EAGER_GRAPH=$g timeout 60 mpirun -np $1 $flags -x CUDA_MPS_PIPE_DIRECTORY -x MPINCCL_EAGER_GRAPH ./bench/mpinccl_bench -o $2 -b $3 -e $3 -n 20 -w 5 -G 1 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   graph-inbox=$g np=$1 $2 $3 round $k: ${line:-failed}" | tee -a $out/captured.txt
  done
done; done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
