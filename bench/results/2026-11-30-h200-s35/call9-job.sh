#!/usr/bin/env bash
# session 35, end: make check at the final source, test_p2p's buffer steps under MPS
out=$1
step() { echo "== $(date +%T) $*"; }
step build; (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j32 > $out/build.log 2>&1 || { grep -E "error" $out/build.log | head; exit 1; }
make -j32 check TESTS= > $out/build-tests.log 2>&1 || { grep -E "error" $out/build-tests.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log $out/build-tests.log | tr '\n' ' ')"
step "make check"
MPINCCL_TEST_TIMEOUT=120 make -j6 check > $out/check.log 2>&1
grep -E "^# |^FAIL|^ERROR" $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "other_memory\|short_here\|pageable" tests/gpu/test_p2p.log | sort | uniq -c | head
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
step "MPS: test_p2p buffer steps (short, other_memory) at 2 4"
for only in short other_memory; do
  TEST_P2P_ONLY=$only MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY -x TEST_P2P_ONLY" tests/run-test ./tests/gpu/test_p2p >> $out/p2p-mps.log 2>&1; echo "$only: exit $?"
done
grep -E "failures|np=.*(PASS|FAIL)|other_memory|short" $out/p2p-mps.log | head -20
echo quit | nvidia-cuda-mps-control; sleep 1
step done
