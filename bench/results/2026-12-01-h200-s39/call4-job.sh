#!/usr/bin/env bash
# session 39 call 4: test_abort with 10 and 40 queued replays under MPS
# (inbox, two hops) and without, after the watchdog repeats an aborted
# peer's release; test_fault_ipc.
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1; make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
one() { # label VAR=value...
  local label=$1; shift
  local t0=$(date +%s)
  tests/gpu/fault_launch.sh test_abort "$@" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=P2P,INIT CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY > $out/run.tmp 2>&1
  echo "   $label: exit $? after $(( $(date +%s) - t0 )) s :: $(grep -h 'test_abort:' $out/run.tmp | sed 's/.*rank 1 saw/rank 1 saw/' | cut -c1-230) :: $(grep -h 'device idle\|still had work' $out/run.tmp | sed 's/.*INFO //' | tr '\n' '|')"
  cat $out/run.tmp >> $out/all.log
}
step "no MPS"
one r40 TEST_ABORT_WAIT=graph TEST_ABORT_REPLAYS=40
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS"
one r10 TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=10
one r40 TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=40
one r40twohop TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=0 TEST_ABORT_REPLAYS=40
one r40memops TEST_ABORT_WAIT=graph MPINCCL_KERNEL_SYNC=0 TEST_ABORT_REPLAYS=40
one r6 TEST_ABORT_WAIT=graph
tests/gpu/fault_launch.sh test_fault_ipc MPINCCL_WATCHDOG_MS=200 CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY > $out/run.tmp 2>&1; echo "   fault_ipc: exit $? :: $(grep -h 'test_fault_ipc:' $out/run.tmp | cut -c1-200)"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
rm -f $out/run.tmp; step done
