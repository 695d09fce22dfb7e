#!/usr/bin/env bash
# session 58, call 2: compute-sanitizer (memcheck) on GPU tests run bx's and
# run by's jobs leave out, after this session's review fixes (pair files
# with one error record per side; a stream's event follows its stream):
# test_p2p's error steps (mismatch, short_buffer, short_here, other_memory)
# and pool_buffers, one mpirun each, 2 ranks; test_gpu_comm, 2 ranks;
# test_peer_left (2 ranks).  Memory accesses only, as run-device.sh's own
# memcheck step (its comment says why).
out=$1
mkdir -p $out
(autoreconf -fi && ./configure -q && make -j16 && make -j16 check TESTS=) > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
flags=$(tests/run-test --mpirun-flags)
ms="$sanitizer --tool memcheck --report-api-errors no --error-exitcode 9"
n=0
for step in "mismatch(" "short_buffer(" "short_here(" "other_memory(" "pool_buffers("; do
  n=$((n + 1))
  TEST_P2P_ONLY="$step" timeout 100 mpirun -np 2 $flags -x TEST_P2P_ONLY $ms ./tests/gpu/test_p2p > $out/memcheck-p2p-$n.log 2>&1
  echo "test_p2p $step: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/memcheck-p2p-$n.log) ranks with 0 errors; $(grep ' done (' $out/memcheck-p2p-$n.log | tail -1)"
done
timeout 200 mpirun -np 2 $flags $ms ./tests/gpu/test_gpu_comm > $out/memcheck-gpu-comm.log 2>&1
echo "test_gpu_comm: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/memcheck-gpu-comm.log) ranks with 0 errors; $(grep -E 'failures' $out/memcheck-gpu-comm.log | tail -1)"
timeout 150 mpirun -np 2 $flags $ms ./tests/gpu/test_peer_left > $out/memcheck-peer-left.log 2>&1
echo "test_peer_left: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/memcheck-peer-left.log) ranks with 0 errors; $(grep -cE ' ok$' $out/memcheck-peer-left.log) ok lines, $(grep -c FAIL $out/memcheck-peer-left.log) FAIL lines"
rm -f $out/build.log
