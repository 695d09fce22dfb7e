#!/usr/bin/env bash
# session 36 final call: the final source.  make check; MPS: test_p2p graph
# steps at 2 4 8; 8 B sendrecv under MPS (not captured), b4fd521 against the
# final source, five interleaved pairs of jobs; the 8-rank halo's host time.
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning $out/build.log)"
if [ ! -x /tmp/old/bench/mpinccl_bench ]; then
  step "build old"; rm -rf /tmp/old; tar xzf .device/old-src.tgz -C /tmp
  (cd /tmp/old && autoreconf -fi && ./configure -q && make -j32) > $out/build-old.log 2>&1 || { tail -5 $out/build-old.log; exit 1; }
fi
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
x="-x CUDA_MPS_PIPE_DIRECTORY"
step "MPS: test_p2p graph steps at 2 4 8"
TEST_P2P_ONLY=graph MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags $x -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p > $out/p2p-graph-mps.log 2>&1; echo "exit $?"
grep -E "np=.*(PASS|FAIL)" $out/p2p-graph-mps.log
step "MPS: 8 B sendrecv, old / new, five pairs"
for k in 1 2 3 4 5; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    line=$(timeout 60 mpirun -np 2 $flags $x $b -o sendrecv -b 8 -e 8 -n 1000 -w 100 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
    echo "   $v job $k: ${line:-failed}" | tee -a $out/ab-8b.txt
  done
done
for v in old new old new; do
  b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
  line=$(timeout 60 mpirun -np 8 $flags $x $b -o halo -b 64K -e 64K -n 20 2>&1 | grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
  echo "   $v halo: ${line:-failed}" | tee -a $out/ab-8b.txt
done
echo quit | nvidia-cuda-mps-control; sleep 1
step done
