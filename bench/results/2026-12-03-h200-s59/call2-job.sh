#!/usr/bin/env bash
# session 59, call 2: test_peer_left alone, after its fifth communicator's
# group moved to a thread of its own (in call 1 it shared the fourth's
# group, whose refused receive kept the wait from being launched).
out=$1
mkdir -p $out
(autoreconf -fi && ./configure -q && make -j16 && make -j16 tests/gpu/test_peer_left) > $out/build.log 2>&1 || { tail -20 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
for i in 1 2 3; do
  MPINCCL_TEST_TIMEOUT=120 tests/run-test ./tests/gpu/test_peer_left > $out/peer_left-$i.log 2>&1
  echo "run $i: exit $?"
  grep '^test_peer_left' $out/peer_left-$i.log
done
rm -f $out/build.log
