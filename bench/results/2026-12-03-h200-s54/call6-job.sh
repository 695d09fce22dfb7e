#!/usr/bin/env bash
# session 54, call 6: the last library change (the stage's and the device
# flags' exports refuse memory CUDA IPC cannot share; log and help texts):
# build, then test_p2p and test_rma at 2 processes (staged pool and
# virtual-memory buffers, device flags, windows), as far as the session's
# device time allows.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
for t in test_p2p test_rma; do
  MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=150 tests/run-test tests/gpu/$t > $out/$t.log 2>&1
  echo "$t np=2 rc=$?: $(grep -h 'failures$' $out/$t.log | tr '\n' ' ')"
done
rm -f $out/configure.log $out/build.log
