#!/usr/bin/env bash
# session 39 call 5 (diagnosis, scratch test prints): where rank 1 stops with
# 40 queued replays under MPS through the graph slots' inbox.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1; make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for R in 12 20 40; do
TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=$R NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=P2P,INIT mpirun -np 2 $flags --enable-recovery -x CUDA_MPS_PIPE_DIRECTORY -x TEST_ABORT_WAIT -x MPINCCL_EAGER_GRAPH -x TEST_ABORT_REPLAYS -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS tests/gpu/test_abort > $out/run-$R.log 2>&1 &
pid=$!; k=0
while kill -0 $pid 2>/dev/null && [ $k -lt 15 ]; do sleep 1; k=$((k+1)); done
echo "R=$R: $( kill -0 $pid 2>/dev/null && echo HUNG || echo done) after $k s; $(grep -c 'DIAG.*launch ' $out/run-$R.log) launches; $(grep 'DIAG' $out/run-$R.log | tail -2 | tr '\n' '|')"
if kill -0 $pid 2>/dev/null; then
  for p in $(pgrep -f tests/gpu/test_abort | grep -v $pid); do
    echo "pid $p:"; for t in /proc/$p/task/*; do echo "  $(cat $t/comm) $(cat $t/wchan) $(awk '{print $3}' $t/stat)"; done
  done > $out/threads-$R.txt
  head -40 $out/threads-$R.txt
  kill -9 $pid; pkill -9 -f tests/gpu/test_abort; sleep 2
  echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps; sleep 1; nvidia-cuda-mps-control -d; sleep 1
fi
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
