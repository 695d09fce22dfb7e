#!/usr/bin/env bash
# session 38 call 1: build; make check; MPS: test_p2p whole at 2 and 8
# (graph slots' inbox now on by default), graph steps at 2 4 8 with memops
# only and with two hops (EAGER_GRAPH=0), test_rma at 2; fault and abort
# tests under MPS (graph mode with kernel and memops; over UCX too);
# captured timings EAGER_GRAPH 0/1.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "test_abort:" tests/gpu/launch_abort_ipc.sh.log | cut -c1-400
flags=$(tests/run-test --mpirun-flags)
run_t() { # test log np only [VAR=value ...]
  local t=$1 log=$2 np=$3 only=$4; shift 4
  local xs="" v; for v in "$@"; do xs="$xs -x ${v%%=*}"; done
  env "$@" TEST_P2P_ONLY=$only TEST_RMA_ONLY=$only MPINCCL_TEST_NP="$np" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY -x TEST_P2P_ONLY -x TEST_RMA_ONLY $xs" tests/run-test ./tests/gpu/$t >> $out/$log 2>&1; echo "exit $?"
  grep -E "np=.*(PASS|FAIL)" $out/$log | tail -n 4
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS: fault and abort tests"
for f in "test_fault_ipc MPINCCL_WATCHDOG_MS=200" test_abort "test_abort TEST_ABORT_WAIT=graph" "test_abort TEST_ABORT_WAIT=graph MPINCCL_KERNEL_SYNC=0" "test_abort TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=0" "test_abort TEST_ABORT_WAIT=graph MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3"; do
  tests/gpu/fault_launch.sh $f CUDA_MPS_PIPE_DIRECTORY="$CUDA_MPS_PIPE_DIRECTORY" > $out/fault.tmp 2>&1
  echo "   $f: exit $? :: $(grep -h -E 'test_(abort|fault_ipc):' $out/fault.tmp | cut -c1-330)"; cat $out/fault.tmp >> $out/fault-mps.log
done
step "MPS: test_p2p graph steps, memops only, at 2 4 8"; run_t test_p2p p2p-graph-memops.log "2 4 8" graph MPINCCL_KERNEL_SYNC=0
step "MPS: test_p2p graph steps, two hops, at 2 4 8"; run_t test_p2p p2p-graph-twohops.log "2 4 8" graph MPINCCL_EAGER_GRAPH=0
step "MPS: test_p2p whole at 2 8"; run_t test_p2p p2p-mps.log "2 8" ""
step "MPS: test_rma whole at 2"; run_t test_rma rma-mps.log "2" ""
step "MPS: captured, EAGER_GRAPH 0 / 1"
for k in 1 2; do for g in 1 0; do
  for cfg in "8 halo 64K" "8 halo 4K" "2 sendrecv 8" "4 alltoall 4K"; do
    set -- $cfg
    line=$(MPINCCL_EAGER_GRAPH=$g timeout 60 mpirun -np $1 $flags -x CUDA_MPS_PIPE_DIRECTORY -x MPINCCL_EAGER_GRAPH ./bench/mpinccl_bench -o $2 -b $3 -e $3 -n 20 -w 5 -G 1 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   graph-inbox=$g np=$1 $2 $3 round $k: ${line:-failed}" | tee -a $out/captured.txt
  done
done; done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
