#!/usr/bin/env bash
# session 42: test_reset with the renewal (np 1, 2, 4; MPS 2; over UCX 2; the survivor step at 1 and 2).
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
run() { local tag=$1; shift; env "$@" MPINCCL_TEST_TIMEOUT=90 tests/run-test ./tests/gpu/test_reset > $out/reset-$tag.log 2>&1; echo "$tag exit $? :: $(grep -h 'failures$' $out/reset-$tag.log | tr '\n' ' ')"; grep -h 'expected\|wrong\|Caught\|WARN' $out/reset-$tag.log | head -8; }
for np in 1 2 4; do run np$np MPINCCL_TEST_NP=$np; done
run ucx2 MPINCCL_TEST_NP=2 MPINCCL_TRANSPORT=ucx
run surv1 MPINCCL_TEST_NP=1 TEST_RESET_SURVIVOR=1
run surv2 MPINCCL_TEST_NP=2 TEST_RESET_SURVIVOR=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
run mps2 MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
echo "== without the renewal at creation (init.c's call taken out), np 1 and 2"
cp src/core/init.c /tmp/init.c.keep
sed -i 's|^    mpn_device_renew(job->device);.*$|    /* (taken out for this run) */|' src/core/init.c
grep -c 'mpn_device_renew' src/core/init.c
make -j16 > $out/build-old.log 2>&1 && make -j16 check TESTS= >> $out/build-old.log 2>&1 || echo "old build failed"
MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="1 2" tests/run-test ./tests/gpu/test_reset > $out/reset-old.log 2>&1; echo "old exit $? :: $(grep -h 'failures$' $out/reset-old.log | tr '\n' ' ')"; grep -h 'expected\|wrong\|Caught' $out/reset-old.log | head -6
cp /tmp/init.c.keep src/core/init.c
make -j16 > /dev/null 2>&1 && make -j16 check TESTS= > /dev/null 2>&1
