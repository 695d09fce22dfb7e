#!/usr/bin/env bash
# session 47, call 1: bench/run-device.sh --no-variants at the session's library source
# (run bo: bootstrap failure notices), then test_reset over UCX at 2 and 4 and under MPS at 2, 4, 8.
out=$1
bench/run-device.sh $out/res --no-variants > $out/log.txt 2>&1
echo "run-device exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|warning' $out/log.txt | head
# what make check's graph steps printed (imports held open, UCX groups kept and freed)
grep -h 'held open\|not freed\|outliving' tests/gpu/test_p2p*.log 2>/dev/null | sort | uniq -c | tee $out/graph-steps.txt | head -30
flags=$(tests/run-test --mpirun-flags)
run() { local tag=$1; shift; env "$@" MPINCCL_TEST_TIMEOUT=90 tests/run-test ./tests/gpu/test_reset > $out/res/reset-$tag.log 2>&1; echo "$tag exit $? :: $(grep -h 'failures$' $out/res/reset-$tag.log | tr '\n' ' ')"; grep -h 'expected\|wrong\|Caught' $out/res/reset-$tag.log | head -4; }
run ucx MPINCCL_TEST_NP="2 4" MPINCCL_TRANSPORT=ucx
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
run mps MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
cd $out && tar czf res.tgz res log.txt && rm -rf res
