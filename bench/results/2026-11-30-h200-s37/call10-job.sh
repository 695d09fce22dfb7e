#!/usr/bin/env bash
# session 37: captured messages through their graph slot's inbox
# (MPINCCL_EAGER_GRAPH).  Build; MPS: test_p2p graph steps at 2 4 8, whole
# at 2 and 8, test_rma at 2; no MPS: graph steps at 2; MPS A/B of
# MPINCCL_EAGER_GRAPH 0 / 1 on captured exchanges; make check.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
run_t() { # test log np only [mpirun flags]
  local t=$1 log=$2 np=$3 only=$4; shift 4
  TEST_P2P_ONLY=$only TEST_RMA_ONLY=$only MPINCCL_TEST_NP="$np" MPINCCL_TEST_TIMEOUT=120 MPINCCL_MPIRUN_FLAGS="$flags $* -x TEST_P2P_ONLY -x TEST_RMA_ONLY" tests/run-test ./tests/gpu/$t > $out/$log 2>&1; echo "exit $?"
  grep -E "np=.*(PASS|FAIL)|wrong|failures so far" $out/$log | grep -v "(0 failures so far)" | head -8
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p graph steps at 2 4 8"; run_t test_p2p p2p-graph-mps.log "2 4 8" graph $x -x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=P2P
grep -o "[0-9]* captured through their graph slots' inbox" $out/p2p-graph-mps.log | sort | uniq -c | head -5
step "MPS: test_p2p whole at 2 8"; run_t test_p2p p2p-mps.log "2 8" "" $x
step "MPS: test_rma whole at 2"; run_t test_rma rma-mps.log "2" "" $x
step "MPS: MPINCCL_EAGER_GRAPH 0 / 1, captured"
for k in 1 2; do for v in 0 1; do
  for cfg in "2 sendrecv 8 4K 8" "8 halo 4K 4K 2" "8 halo 64K 64K 2" "4 alltoall 1K 4K 4"; do
    set -- $cfg
    timeout 60 mpirun -np $1 $flags $x -x MPINCCL_EAGER_GRAPH=$v ./bench/mpinccl_bench -o $2 -b $3 -e $4 -f $5 -n 20 -w 5 -G 1 -c 1 2>&1 |
      grep -E '^ +[0-9]+ +[0-9.]+ ' | sed "s/^/   v$v np=$1 $2 round $k: /" | tee -a $out/ab.txt
  done
done; done
echo quit | nvidia-cuda-mps-control; sleep 2
step "no MPS: test_p2p graph steps at 2"; run_t test_p2p p2p-graph.log "2" graph
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# (TOTAL|PASS|SKIP|FAIL|ERROR)" $out/check.log
step done
