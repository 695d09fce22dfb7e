#!/usr/bin/env bash
# session 47, call 2: the rendezvous told of a rank refused before it joins
# (84d760d, 48a28ec): build, make check, test_p2p and test_rma under MPS at 2 and 4,
# the README's demo.
out=$1
mkdir -p $out
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || { tail $out/configure.log; exit 1; }
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
flags=$(tests/run-test --mpirun-flags)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
for t in test_p2p test_rma; do
  MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$t > $out/mps-$t.log 2>&1
  echo "MPS $t exit $? :: $(grep -h 'failures$' $out/mps-$t.log | tr '\n' ' ')"
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
./run-demo > $out/demo.log 2>&1; echo "run-demo exit $?"; grep -E 'time/iter|check' $out/demo.log | head -4
