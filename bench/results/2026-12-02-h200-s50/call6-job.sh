#!/usr/bin/env bash
# session 50, call 6: the 8 B sendrecv of 2 ranks (5 jobs of 1000, as
# run-device.sh's repeat) at the final library source, without and with
# MPS, each job against the floors it measured itself: the check that the
# session's host-side changes (ncclGroupEnd keeps its first error's text)
# did not slow the host-paced path.  Not a reference run.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 -C . bench/mpinccl_bench >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
flags=$(tests/run-test --mpirun-flags)
run5() { # label extra
  for k in 1 2 3 4 5; do
    timeout 120 mpirun -np 2 $flags $2 ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 > $out/$1-$k.txt 2>&1
    echo "$1 job $k: $(grep -E '^ +8 ' $out/$1-$k.txt | head -1)"
  done
  grep -h -i "floor" $out/$1-1.txt | head -6
}
run5 nomps ""
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
run5 mps "-x CUDA_MPS_PIPE_DIRECTORY"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
