#!/usr/bin/env bash
# session 43, call 3 (final source): build; make check (with test_exit_watchdog); compute-sanitizer on test_rma at 2;
# the put-ucx benchmark 6 times (the UCX exit fatal); test_p2p and test_rma under MPS at 2 and 8.
out=$1
(autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check > $out/check.log 2>&1
grep -E '^(FAIL|ERROR|#)' $out/check.log
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" "$out/failed-$(basename "${f%.trs}").log"; done
grep -h "ranks, " tests/mpi/test_ucx_host.log tests/mpi/test_exit_watchdog.log | tr '\n' ' '; echo
flags=$(tests/run-test --mpirun-flags)
echo "== compute-sanitizer memcheck, test_rma, 2 ranks"
timeout 200 mpirun -np 2 $flags /usr/local/cuda/bin/compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/test_rma > $out/rma-sanitizer.log 2>&1; echo "exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/rma-sanitizer.log) ranks with 0 errors"; grep -h 'failures$' $out/rma-sanitizer.log
echo "== put-ucx, 6 jobs"
for i in 1 2 3 4 5 6; do
  MPINCCL_TRANSPORT=ucx timeout 120 mpirun -np 2 $flags -x MPINCCL_TRANSPORT ./bench/mpinccl_bench -o put -b 4K -e 256M -f 16 -n 10 -w 2 --net > $out/put-ucx-$i.txt 2>&1
  echo "job $i exit $? :: fatal lines $(grep -c -i 'fatal' $out/put-ucx-$i.txt) :: $(tail -n 1 $out/put-ucx-$i.txt)"
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mpinccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/mpinccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d; sleep 1
MPINCCL_TEST_NP="2" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/test_reset > $out/reset-mps.log 2>&1; echo "test_reset MPS 2: exit $? :: $(grep -h 'failures$' $out/reset-mps.log)"
for t in test_p2p test_rma; do
  MPINCCL_TEST_NP="2 8" MPINCCL_MPIRUN_FLAGS="$flags -x CUDA_MPS_PIPE_DIRECTORY" tests/run-test ./tests/gpu/$t > $out/$t-mps.log 2>&1; echo "$t MPS 2 8: exit $? :: $(grep -h 'failures$' $out/$t-mps.log | tr '\n' ' ')"
done
echo quit | timeout 10 nvidia-cuda-mps-control; sleep 1; pkill -9 -f nvidia-cuda-mps
cd $out && tar czf res.tgz *.log *.txt && find . -maxdepth 1 -name '*.log' -delete && find . -maxdepth 1 -name '*.txt' -delete
