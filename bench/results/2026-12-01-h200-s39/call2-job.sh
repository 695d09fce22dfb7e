#!/usr/bin/env bash
# session 39 call 2: build; make check; MPS: test_p2p at 2 4 8 (graph steps
# with the inbox and with two hops), test_rma at 2 4 8, the abort and fault
# tests; test_rma over UCX at 2.
out=$1
step() { echo "== $(date +%T) $*"; }
step build
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "test_abort:" tests/gpu/launch_abort_ipc.sh.log | cut -c1-200
flags=$(tests/run-test --mpirun-flags)
run_t() { # test log np only [VAR=value ...]
  local t=$1 log=$2 np=$3 only=$4; shift 4
  local xs="" v; for v in "$@"; do xs="$xs -x ${v%%=*}"; done
  env "$@" TEST_P2P_ONLY=$only TEST_RMA_ONLY=$only MPINCCL_TEST_NP="$np" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY -x TEST_P2P_ONLY -x TEST_RMA_ONLY $xs" tests/run-test ./tests/gpu/$t >> $out/mps.log 2>&1; echo "   $t np=$np ${only:-whole} $*: exit $?"
  grep -E "np=.*(PASS|FAIL)" $out/mps.log | tail -n 3
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS: fault and abort tests"
for f in "test_fault_ipc MPINCCL_WATCHDOG_MS=200" test_abort "test_abort TEST_ABORT_WAIT=signal" "test_abort TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1" "test_abort TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=40" "test_abort TEST_ABORT_WAIT=graph MPINCCL_KERNEL_SYNC=0" "test_abort TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=0"; do
  tests/gpu/fault_launch.sh $f CUDA_MPS_PIPE_DIRECTORY="$CUDA_MPS_PIPE_DIRECTORY" > $out/fault.tmp 2>&1
  echo "   $f: exit $? :: $(grep -h -E 'test_(abort|fault_ipc):' $out/fault.tmp | cut -c1-260)"; cat $out/fault.tmp >> $out/fault-mps.log
done
step "MPS: test_p2p"; run_t test_p2p p2p "2 4 8" ""
run_t test_p2p p2p "2 4 8" graph MPINCCL_EAGER_GRAPH=1
step "MPS: test_rma"; run_t test_rma rma "2 4 8" ""
echo quit | nvidia-cuda-mps-control; sleep 1
step "no MPS: test_abort graph, 40 replays"
tests/gpu/fault_launch.sh test_abort TEST_ABORT_WAIT=graph TEST_ABORT_REPLAYS=40 > $out/fault.tmp 2>&1; echo "   exit $? :: $(grep -h 'test_abort:' $out/fault.tmp | cut -c1-260)"
step done
