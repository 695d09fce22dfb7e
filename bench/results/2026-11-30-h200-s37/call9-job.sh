#!/usr/bin/env bash
# session 37 final call: the final source.  Build it and bfe6d61 (/tmp/old);
# MPS: test_p2p halo steps at 2 4 8, whole at 4 and 8, test_rma at 4;
# old / new halos and 8 B sendrecv interleaved; then bench/run-device.sh
# --no-variants (make check, both regimes, compute-sanitizer).
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
(rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp && cd /tmp/old && autoreconf -fi && ./configure -q && make -j32) > $out/build-old.log 2>&1 &
flags=$(tests/run-test --mpirun-flags)
run_t() { # test log np only [mpirun flags]
  local t=$1 log=$2 np=$3 only=$4; shift 4
  TEST_P2P_ONLY=$only TEST_RMA_ONLY=$only MPINCCL_TEST_NP="$np" MPINCCL_MPIRUN_FLAGS="$flags $* -x TEST_P2P_ONLY -x TEST_RMA_ONLY" tests/run-test ./tests/gpu/$t > $out/$log 2>&1; echo "exit $?"
  grep -E "np=.*(PASS|FAIL)" $out/$log
}
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p halo steps at 2 4 8"; run_t test_p2p p2p-halo-mps.log "2 4 8" halo $x
step "MPS: test_p2p whole at 4 8"; run_t test_p2p p2p-mps.log "4 8" "" $x
step "MPS: test_rma whole at 4"; run_t test_rma rma-mps.log "4" "" $x
wait
[ -x /tmp/old/bench/mpinccl_bench ] || { echo "old build failed"; tail -3 $out/build-old.log; }
step "MPS: old / new"
for k in 1 2; do for v in new old; do
  b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
  for cfg in "8 halo 64K" "8 halo 16K" "4 halo 64K" "2 sendrecv 8"; do
    set -- $cfg
    line=$(timeout 60 mpirun -np $1 $flags $x $b -o $2 -b $3 -e $3 -n 50 -w 10 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   $v np=$1 $2 $3 round $k: ${line:-failed}" | tee -a $out/ab.txt
  done
done; done
echo quit | nvidia-cuda-mps-control; sleep 2
step "run-device.sh --no-variants"
d=$(mktemp -d)
bench/run-device.sh $d/res --no-variants > $out/log.txt 2>&1; echo "exit $?" >> $out/log.txt
cp $d/res/perf.png $out/ 2>/dev/null
tar czf $out/res.tgz -C $d res
grep -E "^# (TOTAL|PASS|SKIP|FAIL)|median|best of 3|exit|np 2:" $out/log.txt | head -40
step done
