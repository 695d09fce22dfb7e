#!/usr/bin/env bash
# session 39 call 7: the escape per pair (final source): build; make check;
# test_abort with 40 queued replays (no MPS; MPS inbox, two hops, memops)
# and the other abort/fault tests under MPS; test_p2p at 2 and 8 and
# test_rma at 2 under MPS; 8 B sendrecv and halo3d np2 once each.
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
flags=$(tests/run-test --mpirun-flags)
one() { # label prog VAR=value...
  local label=$1 prog=$2; shift 2
  local t0=$(date +%s)
  tests/gpu/fault_launch.sh $prog "$@" CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY > $out/f.tmp 2>&1
  echo "   $label: exit $? after $(( $(date +%s) - t0 )) s :: $(grep -h "$prog:" $out/f.tmp | sed 's/.*rank 1 saw/rank 1 saw/' | cut -c1-200)"
  cat $out/f.tmp >> $out/fault.log
}
step "no MPS"; one r40 test_abort TEST_ABORT_WAIT=graph TEST_ABORT_REPLAYS=40
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS"
one r40-inbox test_abort TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=40
one r40-twohops test_abort TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=0 TEST_ABORT_REPLAYS=40
one r40-memops test_abort TEST_ABORT_WAIT=graph MPINCCL_KERNEL_SYNC=0 TEST_ABORT_REPLAYS=40
one recv test_abort
one signal test_abort TEST_ABORT_WAIT=signal
one fault test_fault_ipc MPINCCL_WATCHDOG_MS=200
for t in "test_p2p 2 8" "test_rma 2"; do set -- $t; prog=$1; shift
  MPINCCL_TEST_NP="$*" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$prog > $out/$prog-mps.log 2>&1; echo "   $prog MPS np=$*: exit $?"
done
for k in 1 2 3; do timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY ./bench/mpinccl_bench -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +8 ' | sed "s/^/   MPS sendrecv 8B job $k: /"; done
for mode in "" --flag-sync; do timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY ./examples/halo3d $mode 2>&1 | grep -E 'time/iter' | sed "s/^/   MPS halo3d np2 ${mode:-exchange}: /"; done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
rm -f $out/f.tmp; step done
