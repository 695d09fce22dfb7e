#!/usr/bin/env bash
# session 43, call 6 (final source): build; make check; under MPS test_p2p and test_rma at 2 and 8;
# test_reset at 2 ranks 10 times, and under MPS at 2 and 4.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "ranks, " tests/mpi/test_exit_watchdog.log tests/gpu/test_reset.log | tr '\n' ' '; echo
flags=$(tests/run-test --mpirun-flags)
fails=0; for i in $(seq 1 10); do MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=60 tests/run-test ./tests/gpu/test_reset > $out/reset-$i.log 2>&1 || { fails=$((fails+1)); grep -h "wrong\|expected" $out/reset-$i.log | head -3; }; done; echo "test_reset at 2: $fails of 10 runs failed"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/test_reset > $out/reset-mps.log 2>&1; echo "test_reset MPS 2 4: exit $? :: $(grep -h 'failures$' $out/reset-mps.log | tr '\n' ' ')"
for t in test_p2p test_rma; do
  MPINCCL_TEST_NP="2 8" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$t > $out/$t-mps.log 2>&1; echo "$t MPS 2 8: exit $? :: $(grep -h 'failures$' $out/$t-mps.log | tr '\n' ' ')"
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
cd $out && tar czf res.tgz *.log && find . -maxdepth 1 -name '*.log' -delete
