#!/usr/bin/env bash
# session 48, call 1: the rendezvous withdrawal and the mailbox's dropping of
# late messages (541af91): build, make check, the MPI bootstrap test at 2-4,
# and test_p2p / test_rma under MPS at 2 and 4 processes.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR)|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
grep -h 'Checks' tests/unit/test_comm_local.log
grep -h 'failures' tests/mpi/test_bootstrap_mpi.log
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
