#!/usr/bin/env bash
# session 36 call 6: self messages in the kernel, captured or not.  test_p2p
# whole under MPS at 1 2 4 8 and without MPS at 1; old (b4fd521) against new.
out=$1
step() { echo "== $(date +%T) $*"; }
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > /dev/null 2>&1
make -j32 > $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
make -j32 check TESTS= > /dev/null 2>&1
if [ ! -x /tmp/old/bench/mpinccl_bench ]; then
  step "build old"; rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp
  (cd /tmp/old && autoreconf -fi && ./configure -q && make -j32) > $out/build-old.log 2>&1 || { tail -5 $out/build-old.log; exit 1; }
fi
flags=$(tests/run-test --mpirun-flags)
step "no MPS: test_p2p at 1"
MPINCCL_TEST_NP="1" tests/run-test ./tests/gpu/test_p2p > $out/p2p-np1.log 2>&1; echo "exit $?"; grep -E "np=.*(PASS|FAIL)|FAIL|wrong" $out/p2p-np1.log | head -5
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p at 1 2 4 8"
MPINCCL_TEST_NP="1 2 4 8" MPINCCL_MPIRUN_FLAGS="$flags $x" tests/run-test ./tests/gpu/test_p2p > $out/p2p-mps.log 2>&1; echo "exit $?"
grep -E "np=.*(PASS|FAIL)|wrong|failures$" $out/p2p-mps.log | grep -v " 0 failures" | head -12
r() { local label=$1; shift; line=$(env "$@" 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | tr '\n' '|'); echo "$label: ${line:-failed}" | tee -a $out/self.txt; }
for k in 1 2 3; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    for np in 4 8; do
      r "MPS $v np=$np a2a" timeout 60 mpirun -np $np $flags $x $b -o alltoall -b 64K -e 4M -f 8 -n 50 -w 10 -c 1
      r "MPS $v np=$np a2a-G" timeout 60 mpirun -np $np $flags $x $b -o alltoall -b 64K -e 4M -f 8 -n 20 -c 1 -G 1
    done
    r "MPS $v np=4 halo" timeout 60 mpirun -np 4 $flags $x $b -o halo -b 4K -e 64K -f 16 -n 50 -w 10 -c 1
    r "MPS $v np=1 sendrecv" timeout 60 mpirun -np 1 $flags $x $b -o sendrecv -b 8 -e 1M -f 128 -n 200 -w 20 -c 1
  done
done
echo quit | nvidia-cuda-mps-control; sleep 1
for v in old new; do
  b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
  r "noMPS $v np=1 sendrecv" timeout 60 mpirun -np 1 $flags $b -o sendrecv -b 8 -e 1M -f 128 -n 200 -w 20 -c 1
  r "noMPS $v np=4 a2a" timeout 60 mpirun -np 4 $flags $b -o alltoall -b 64K -e 64K -n 50 -w 10 -c 1
done
step done
