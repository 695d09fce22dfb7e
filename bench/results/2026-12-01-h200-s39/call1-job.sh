#!/usr/bin/env bash
# session 39 call 1: the abort with queued graph replays, old (2c8c4a1, with
# the new test_abort) against new; make check on the new tree; MPS runs of
# the abort tests and test_rma.
out=$1
step() { echo "== $(date +%T) $*"; }
step build
( (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 && make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1; echo "new build exit $?" ) &
( rm -rf /tmp/old && tar xzf .device/s39-old.tgz -C /tmp && cd /tmp/old && (autoreconf -fi && ./configure -q) > /tmp/old-configure.log 2>&1 && make -j16 > /tmp/old-build.log 2>&1 && make -j16 check TESTS= >> /tmp/old-build.log 2>&1; echo "old build exit $?" ) &
wait
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
abort_run() { # dir label VAR=value...
  local dir=$1 label=$2; shift 2
  local xs="" v; for v in "$@"; do xs="$xs -x ${v%%=*}"; done
  local t0=$(date +%s.%N)
  env "$@" timeout -k 5 40 mpirun -np 2 $flags --enable-recovery $xs $dir/tests/gpu/test_abort > $out/abort.tmp 2>&1
  local rc=$? t1=$(date +%s.%N)
  pkill -9 -f tests/gpu/test_abort 2>/dev/null; sleep 1
  echo "   $label: exit $rc after $(echo "$t1 - $t0" | bc) s :: $(grep -h 'test_abort:' $out/abort.tmp | cut -c1-400)"
  cat $out/abort.tmp >> $out/abort-all.log
}
step "no MPS: old against new, graph mode, 6 replays"
abort_run /tmp/old "old graph" TEST_ABORT_WAIT=graph
abort_run . "new graph" TEST_ABORT_WAIT=graph
abort_run . "new graph 50 replays" TEST_ABORT_WAIT=graph TEST_ABORT_REPLAYS=50
step "make check (new)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "test_abort:" tests/gpu/launch_abort_ipc.sh.log | cut -c1-300
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS: old against new"
abort_run /tmp/old "MPS old graph inbox" TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY
for cfg in "graph inbox:TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1" "graph two hops:TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=0" "graph memops:TEST_ABORT_WAIT=graph MPINCCL_KERNEL_SYNC=0" "receive:TEST_ABORT_WAIT=recv" "signal:TEST_ABORT_WAIT=signal" "graph ucx:TEST_ABORT_WAIT=graph MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3"; do
  abort_run . "MPS new ${cfg%%:*}" ${cfg#*:} CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY
done
step "MPS: test_rma at 2 and 4, test_p2p at 2"
for t in "test_rma 2 4" "test_p2p 2"; do set -- $t; prog=$1; shift
  MPINCCL_TEST_NP="$*" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$prog > $out/$prog-mps.log 2>&1; echo "   $prog: exit $?"; grep -E "np=.*(PASS|FAIL)" $out/$prog-mps.log | tail -3
done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
