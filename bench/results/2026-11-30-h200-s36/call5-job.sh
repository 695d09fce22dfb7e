#!/usr/bin/env bash
# session 36 call 5: a captured halo's cost.  Deferred zeros of clearing
# waits (memop.c), captured self messages in the kernel (scratch switch
# MPINCCL_SCRATCH_SELFK), and no zeros at all (MPINCCL_SCRATCH_NOCLEAR,
# timing only: -c 0) against the old build (b4fd521), MPS and not.
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
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY -x MPINCCL_KERNEL_SYNC -x MPINCCL_SCRATCH_SELFK -x MPINCCL_SCRATCH_NOCLEAR"
step "MPS: test_p2p graph steps at 2 4 8, selfk off and on; test_rma graph at 2 4"
for sk in "" 1; do
  MPINCCL_SCRATCH_SELFK=$sk TEST_P2P_ONLY=graph MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-graph-mps-$sk.log 2>&1; echo "selfk=$sk exit $?"
  grep -E "np=.*(PASS|FAIL)|wrong" $out/p2p-graph-mps-$sk.log | head
done
export MPINCCL_SCRATCH_SELFK=1
TEST_P2P_ONLY=halo MPINCCL_TEST_NP="4" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY -x NCCL_DEBUG -x NCCL_DEBUG_SUBSYS" NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=P2P tests/run-test ./tests/gpu/test_p2p > $out/trace4.log 2>&1; echo "halo np 4 trace exit $?"
grep -o "flag kernel of [0-9]* flags, [0-9]* copies, [0-9]* blocks" $out/trace4.log | sort | uniq -c | sort -rn | head -6
unset MPINCCL_SCRATCH_SELFK
TEST_RMA_ONLY=graph MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_RMA_ONLY" tests/run-test ./tests/gpu/test_rma > $out/rma-graph-mps.log 2>&1; echo "rma graph exit $?"
r() { # label, env..., -- args
  local label=$1; shift
  line=$(env "$@" 2>&1 | grep -E "^ +[0-9]+ +[0-9.]+ " | head -1)
  echo "$label: ${line:-failed}" | tee -a $out/clear.txt
}
for k in 1 2; do
  for np in 4 8; do
    for f in 4K 64K; do
      a="-o halo -b $f -e $f -n 20 -G 1"
      r "MPS np=$np f=$f old" timeout 60 mpirun -np $np $flags $x /tmp/old/bench/mpinccl_bench $a -c 1
      r "MPS np=$np f=$f new" timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench $a -c 1
      r "MPS np=$np f=$f new+selfk" MPINCCL_SCRATCH_SELFK=1 timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench $a -c 1
      r "MPS np=$np f=$f noclear" MPINCCL_SCRATCH_NOCLEAR=1 timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench $a -c 0
      r "MPS np=$np f=$f old ks=0" MPINCCL_KERNEL_SYNC=0 timeout 60 mpirun -np $np $flags $x /tmp/old/bench/mpinccl_bench $a -c 1
      r "MPS np=$np f=$f new ks=0" MPINCCL_KERNEL_SYNC=0 timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench $a -c 1
    done
    a="-o alltoall -b 64K -e 64K -n 20 -G 1 -c 1"
    r "MPS np=$np a2a old" timeout 60 mpirun -np $np $flags $x /tmp/old/bench/mpinccl_bench $a
    r "MPS np=$np a2a new" timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench $a
    r "MPS np=$np a2a new+selfk" MPINCCL_SCRATCH_SELFK=1 timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench $a
  done
  r "MPS np=2 sendrecv 8 old" timeout 60 mpirun -np 2 $flags $x /tmp/old/bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 200 -w 20 -G 1
  r "MPS np=2 sendrecv 8 new" timeout 60 mpirun -np 2 $flags $x ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 200 -w 20 -G 1
  r "MPS np=2 sendrecv 8 new ks=0" MPINCCL_KERNEL_SYNC=0 timeout 60 mpirun -np 2 $flags $x ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 200 -w 20 -G 1
  r "MPS np=2 sendrecv 8 old ks=0" MPINCCL_KERNEL_SYNC=0 timeout 60 mpirun -np 2 $flags $x /tmp/old/bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 200 -w 20 -G 1
done
echo quit | nvidia-cuda-mps-control; sleep 1
for k in 1 2; do
  for np in 4 8; do
    a="-o halo -b 4K -e 4K -n 20 -G 1"
    r "noMPS np=$np old" timeout 60 mpirun -np $np $flags $x /tmp/old/bench/mpinccl_bench $a -c 1
    r "noMPS np=$np new" timeout 60 mpirun -np $np $flags $x ./bench/mpinccl_bench $a -c 1
  done
done
step done
