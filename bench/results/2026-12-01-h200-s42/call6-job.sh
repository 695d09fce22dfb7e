#!/usr/bin/env bash
# session 42, call 6: make check; test_reset at 1,2,4,8, UCX 2, MPS 2/4, sanitizer 2;
# then without the device_gone guard (patch reversed) at 1 and 2.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
echo "== make check"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
flags=$(tests/run-test --mpirun-flags)
run() { local tag=$1; shift; env "$@" MPINCCL_TEST_TIMEOUT=90 tests/run-test ./tests/gpu/test_reset > $out/reset-$tag.log 2>&1; echo "$tag exit $? :: $(grep -h 'failures$' $out/reset-$tag.log | tr '\n' ' ')"; grep -h 'expected\|wrong\|Caught' $out/reset-$tag.log | head -6; }
run ucx2 MPINCCL_TEST_NP=2 MPINCCL_TRANSPORT=ucx
run ucx4 MPINCCL_TEST_NP=4 MPINCCL_TRANSPORT=ucx
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
run mps MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY"
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
echo "== compute-sanitizer memcheck, test_reset, 2 ranks"
timeout 240 mpirun -np 2 $flags /usr/local/cuda/bin/compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/test_reset > $out/reset-sanitizer.log 2>&1; echo "exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/reset-sanitizer.log) ranks with 0 errors"; grep -h 'failures$' $out/reset-sanitizer.log
echo "== without the device_gone guard (patch reversed), np 1, 2, 4"
patch -s -p1 -R < .device/s42-guard.patch && make -j16 > $out/build-noguard.log 2>&1 && make -j16 check TESTS= >> $out/build-noguard.log 2>&1 || echo "no-guard build failed"
for i in 1 2 3; do run noguard$i MPINCCL_TEST_NP="1 2 4" MPINCCL_TEST_TIMEOUT=60; done
patch -s -p1 < .device/s42-guard.patch; make -j16 > /dev/null 2>&1 && make -j16 check TESTS= > /dev/null 2>&1
