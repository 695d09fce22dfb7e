#!/usr/bin/env bash
# session 56, call 4: call 3 again under MPS (call 3 ran without it: the
# functions of setup.sh were not exported to this script); the 8 B sendrecv, the session's
# first library source (bf472a1, from old-src.tar: git archive) against its
# final one (the tree), interleaved, 5 jobs each: run bv (call 2) gave a
# median of 2.03x the flag-only floor, run bu (call 1, bf472a1) 1.51x.
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
    timeout 60 mpirun -np 2 $flags -x CUDA_MPS_PIPE_DIRECTORY $b -o sendrecv -b 8 -e 8 -n 1000 -w 100 > $out/$v-$k.txt 2>&1
    echo "$v job $k: $(grep -E '^ +8 ' $out/$v-$k.txt | head -1)"
  done
done
mps_stop
rm -f $out/build-new.log $out/build-old.log
