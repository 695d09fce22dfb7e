#!/usr/bin/env bash
# session 59, call 7: the final library source (call 6 plus two helpers
# that count a wait's signals and ask whether a peer ended normally in one
# place each, no behaviour change): the whole
# make check, then test_p2p and test_rma under MPS at 2 and 4 ranks.
out=$1
mkdir -p $out
(autoreconf -fi && ./configure -q && make -j16 && make -j16 check TESTS=) > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
MPINCCL_TEST_TIMEOUT=120 timeout 330 make -j4 check > $out/check.log 2>&1
echo "make check exit $?"
grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)|^(FAIL|ERROR):' $out/check.log
grep -h 'failures$' tests/gpu/test_p2p.log tests/gpu/test_rma.log tests/gpu/test_gpu_comm.log 2>/dev/null | sort | uniq -c
for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' tests/*/*.trs 2>/dev/null); do cp "${f%.trs}.log" $out/; done
flags=$(tests/run-test --mpirun-flags)
mps_start || exit 1; sleep 1
for np in 2 4; do
  for t in test_p2p test_rma; do
    timeout 60 mpirun -np $np $flags -x CUDA_MPS_PIPE_DIRECTORY ./tests/gpu/$t > $out/mps-$t-$np.log 2>&1
    rc=$?
    echo "MPS $t np=$np: exit $rc; $(grep -E 'failures$' $out/mps-$t-$np.log | tail -1)"
    [ $rc = 0 ] && rm -f $out/mps-$t-$np.log
  done
done
mps_stop
rm -f $out/build.log
