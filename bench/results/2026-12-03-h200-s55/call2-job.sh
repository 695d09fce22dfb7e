#!/usr/bin/env bash
# session 55, call 2: compute-sanitizer beyond run bt's memcheck of
# test_p2p's first ring steps, 2 processes each, four runs at once:
# memcheck on test_rma (every step but the threads' ones, which drive
# ranks from threads, as test_p2p's threads_ring that hangs under the
# tool), memcheck on test_p2p's halo steps, racecheck and synccheck on
# test_p2p's ring steps (the copy kernels' shared memory and barriers).
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
flags=$(tests/run-test --mpirun-flags)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run() { # $1: log name, $2: tool, $3: env assignment, $4: program, $5: seconds
  env "$3" timeout $5 mpirun -np 2 $flags -x "${3%%=*}" \
    "$san" --tool $2 --report-api-errors no --error-exitcode 9 "$4" > $out/$1.log 2>&1
  echo "$1: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' $out/$1.log) ranks with 0 errors; $(grep -h 'failures$' $out/$1.log | tr '\n' ' ')"
}
run mem-rma memcheck TEST_RMA_SKIP=threads ./tests/gpu/test_rma 420 > $out/r1 &
run mem-halo memcheck TEST_P2P_ONLY=halo26 ./tests/gpu/test_p2p 300 > $out/r2 &
run race-ring racecheck "TEST_P2P_ONLY=ring(sizes" ./tests/gpu/test_p2p 300 > $out/r3 &
run sync-ring synccheck "TEST_P2P_ONLY=ring(sizes" ./tests/gpu/test_p2p 300 > $out/r4 &
wait
cat $out/r1 $out/r2 $out/r3 $out/r4
for f in mem-rma mem-halo race-ring sync-ring; do
  grep -h "ERROR SUMMARY\|done (" $out/$f.log | tail -4
done
grep -h "=========" $out/*.log | grep -v "ERROR SUMMARY: 0\|COMPUTE-SANITIZER" | sort | uniq -c | sort -rn | head -20
rm -f $out/configure.log $out/build.log $out/r?
cd $out && tar czf logs.tgz *.log && rm -f *.log
