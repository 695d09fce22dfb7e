#!/usr/bin/env bash
# session 39 final call: build; the abort tests with 40 queued graph
# replays (MPS: graph slots' inbox, two hops, memops; no MPS); then, only
# if they pass, the whole device run (bench/run-device.sh --no-variants).
out=$1
step() { echo "== $(date +%T) $*"; }
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
bad=0
one() { # label VAR=value...
  local label=$1; shift
  local t0=$(date +%s)
  tests/gpu/fault_launch.sh test_abort "$@" CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY > $out/abort.tmp 2>&1
  local rc=$?
  [ $rc = 0 ] || bad=1
  echo "   $label: exit $rc after $(( $(date +%s) - t0 )) s :: $(grep -h 'test_abort:' $out/abort.tmp | sed 's/.*rank 1 saw/rank 1 saw/' | cut -c1-240)"
  cat $out/abort.tmp >> $out/abort40.log
}
step "abort with 40 queued replays, no MPS"
one r40 TEST_ABORT_WAIT=graph TEST_ABORT_REPLAYS=40
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "abort with 40 queued replays, MPS"
one mps-r40-inbox TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=1 TEST_ABORT_REPLAYS=40
[ $bad = 0 ] && one mps-r40-twohops TEST_ABORT_WAIT=graph MPINCCL_EAGER_GRAPH=0 TEST_ABORT_REPLAYS=40
[ $bad = 0 ] && one mps-r40-memops TEST_ABORT_WAIT=graph MPINCCL_KERNEL_SYNC=0 TEST_ABORT_REPLAYS=40
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps; sleep 1
rm -f $out/abort.tmp
[ $bad = 0 ] || { step "abort tests failed: no full run"; exit 1; }
step "full run"
d=$(mktemp -d)
bench/run-device.sh $d/res --no-variants > $out/log.txt 2>&1; echo "exit $?" >> $out/log.txt
cp $d/res/perf.png $out/ 2>/dev/null
tar czf $out/res.tgz -C $d res
grep -E "^# |^FAIL|median|best of 3|run-test: np=.*FAIL|exit|MPS: exit|warning|ERROR SUMMARY" $out/log.txt | head -70
step done
