#!/usr/bin/env bash
# session 50, call 8: the final library source after the review (the late-receive count, the group text buffer, the watchdog helper): make check;
# test_p2p and test_rma under MPS at 2 and 4.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'failures$' tests/gpu/test_p2p_ucx.sh.log tests/gpu/test_rma_ucx.sh.log | sort | uniq -c
grep -h 'test_abort:' tests/gpu/launch_abort_*.sh.log | sed 's/.*: //' | sort | uniq -c
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for np in 2 4; do
  for t in test_p2p test_rma; do
    MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=200 MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" \
      tests/run-test tests/gpu/$t > $out/mps-$t-$np.log 2>&1
    echo "MPS $t np=$np rc=$? :: $(grep -h 'failures$' $out/mps-$t-$np.log | tr '\n' ' ')"
  done
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
