#!/usr/bin/env bash
# session 58, call 3: run by's 8-rank halo under MPS took 116.7 us per
# exchange with 90.0 us of host time per group (run bx: 76.0 and 55.9).
# Is it this session's library changes or the machine?  Under MPS,
# interleaved, the library before them (bc14547, from old-src.tar, a git
# archive) and after (the tree's): the 8-rank halo of 64 KiB faces (5 jobs
# each) and the 8 B sendrecv of 2 ranks (3 jobs each, loops of 1000).
out=$1
mkdir -p $out
tar xf old-src.tar -C /tmp && rm -f old-src.tar
(autoreconf -fi && ./configure -q && make -j16 && make -j16 bench/mpinccl_bench) > $out/build-new.log 2>&1 || { tail -20 $out/build-new.log; exit 1; }
(cd /tmp/old && autoreconf -fi && ./configure -q && make -j16 && make -j16 bench/mpinccl_bench) > $out/build-old.log 2>&1 || { tail -20 $out/build-old.log; exit 1; }
echo "warnings: new $(grep -c 'warning:' $out/build-new.log), old $(grep -c 'warning:' $out/build-old.log)"
flags=$(tests/run-test --mpirun-flags)
mps_start || exit 1; sleep 1
echo "columns: size time algbw busbw vs-copy vs-floor #wrong host(us) idle(us) ..."
for k in 1 2 3 4 5; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    timeout 60 mpirun -np 8 $flags -x CUDA_MPS_PIPE_DIRECTORY $b -o halo -b 64K -e 64K -n 20 > $out/$v-halo-$k.txt 2>&1
    echo "$v halo job $k: $(grep -E '^ +65536 ' $out/$v-halo-$k.txt | head -1)"
  done
done
for k in 1 2 3; do
  for v in old new; do
    b=./bench/mpinccl_bench; [ $v = old ] && b=/tmp/old/bench/mpinccl_bench
    timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY $b -o sendrecv -b 8 -e 8 -n 1000 -w 100 > $out/$v-sr-$k.txt 2>&1
    echo "$v sendrecv job $k: $(grep -E '^ +8 ' $out/$v-sr-$k.txt | head -1)"
  done
done
mps_stop
rm -f $out/*.txt $out/build-new.log $out/build-old.log
