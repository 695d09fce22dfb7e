#!/usr/bin/env bash
# session 57, call 2: the host's time per small group, before and after
# the three commits that take the device query, the heap allocations and
# all but one registry lock out of it (library 54d9969 from old-src.tar,
# a git archive, against the tree's).  Under MPS, interleaved, 5 jobs
# each: the 8 B sendrecv of 2 ranks (loops of 1000; time, host time and
# ratio to the job's flag-only floor) and the 8-rank halo of 64 KiB faces
# (host time per group, idle stream).  Then make check of the GPU tests
# the change touches.
out=$1
mkdir -p $out
tar xf old-src.tar -C /tmp && rm -f old-src.tar
(autoreconf -fi && ./configure -q && make -j16 && make -j16 bench/mpinccl_bench) > $out/build-new.log 2>&1 || { tail -20 $out/build-new.log; exit 1; }
(cd /tmp/old && autoreconf -fi && ./configure -q && make -j16 && make -j16 bench/mpinccl_bench) > $out/build-old.log 2>&1 || { tail -20 $out/build-old.log; exit 1; }
echo "warnings: new $(grep -c 'warning:' $out/build-new.log), old $(grep -c 'warning:' $out/build-old.log)"
flags=$(tests/run-test --mpirun-flags)
mps_start || exit 1; sleep 1
for k in 1 2 3 4 5; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY $b -o sendrecv -b 8 -e 8 -n 1000 -w 100 > $out/$v-sr-$k.txt 2>&1
    echo "$v sendrecv job $k: $(grep -E '^ +8 ' $out/$v-sr-$k.txt | head -1)"
  done
done
for k in 1 2 3; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    timeout 60 mpirun -np 8 $flags -x CUDA_MPS_PIPE_DIRECTORY $b -o halo -b 64K -e 64K -n 20 > $out/$v-halo-$k.txt 2>&1
    echo "$v halo job $k: $(grep -E '^ +65536 ' $out/$v-halo-$k.txt | head -1)"
  done
done
mps_stop
echo "columns: size time algbw busbw vs-copy vs-floor #wrong host(us) idle(us)"
MPINCCL_TEST_TIMEOUT=120 make -j4 check TESTS="tests/gpu/test_p2p tests/gpu/test_rma tests/gpu/test_gpu_comm tests/unit/test_alloc_fail" > $out/check.log 2>&1
grep -E '^(PASS|FAIL|SKIP|ERROR|#)' $out/check.log
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log tests/gpu/test_gpu_comm.log 2>/dev/null | sort | uniq -c
rm -f $out/build-new.log $out/build-old.log
