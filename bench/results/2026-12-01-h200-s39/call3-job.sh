#!/usr/bin/env bash
# session 39 call 3: why test_abort with 40 queued replays hung under MPS
# (graph slots' inbox): replay counts, connections, NCCL_DEBUG=INFO, and
# the stacks of both ranks when it hangs.
out=$1
step() { echo "== $(date +%T) $*"; }
[ -x tests/gpu/test_abort ] || { (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1; make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1; }
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
one() { # label VAR=value...
  local label=$1; shift
  local xs="" v; for v in "$@"; do xs="$xs -x ${v%%=*}"; done
  env "$@" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=P2P,INIT mpirun -np 2 $flags --enable-recovery -x CUDA_MPS_PIPE_DIRECTORY -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS $xs tests/gpu/test_abort > $out/run.tmp 2>&1 &
  local pid=$! k=0
  while kill -0 $pid 2>/dev/null && [ $k -lt 25 ]; do sleep 1; k=$((k+1)); done
  if kill -0 $pid 2>/dev/null; then
    echo "   $label: HUNG after $k s"
    for p in $(pgrep -f tests/gpu/test_abort | grep -v $pid); do
      echo "---- pid $p" >> $out/stacks-$label.txt
      timeout 20 gdb -p $p -batch -ex "thread apply all bt 12" >> $out/stacks-$label.txt 2>&1
    done
    kill -9 $pid; pkill -9 -f tests/gpu/test_abort; sleep 2
  else
    wait $pid; echo "   $label: exit $? after $k s :: $(grep -h 'test_abort:' $out/run.tmp | cut -c1-120) :: $(grep -h 'device idle\|still had work' $out/run.tmp | cut -c1-160 | tr '\n' '|')"
  fi
  cp $out/run.tmp $out/run-$label.log
}
step "MPS"
one r10 TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=10
one r40 TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=40
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps; sleep 1
nvidia-cuda-mps-control -d; sleep 1
one r40c32 TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=40 CUDA_DEVICE_MAX_CONNECTIONS=32
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps; sleep 1
nvidia-cuda-mps-control -d; sleep 1
one r40twohop TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=0 TEST_ABORT_REPLAYS=40
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
rm -f $out/run.tmp; step done
ls $out
