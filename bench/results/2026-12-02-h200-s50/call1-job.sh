#!/usr/bin/env bash
# session 50, call 1: the abort fixes over UCX against the library without
# them (.device/fixes.patch: src/ changes 983cc23..da44f63, the watchdog's
# release of an aborted UCX peer's signal waits and the drain's UCX rounds),
# each with the new test_abort modes; then the abort launch scripts as landed.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
modes() { # label
  for m in signals graph_signal graph; do
    tests/gpu/fault_launch.sh test_abort MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3 TEST_ABORT_WAIT=$m > $out/$1-ucx-$m.log 2>&1
    echo "$1 ucx $m: exit $? :: $(grep -h 'test_abort:' $out/$1-ucx-$m.log | tail -1)"
  done
}
patch -R -p1 < .device/fixes.patch > $out/patch.log 2>&1 || { echo "reverse patch failed"; cat $out/patch.log; exit 1; }
make -j16 > $out/build-old.log 2>&1 && make -j16 check TESTS= > $out/build-old-tests.log 2>&1 || { tail -30 $out/build-old.log $out/build-old-tests.log; exit 1; }
modes old
patch -p1 < .device/fixes.patch >> $out/patch.log 2>&1 || { echo "forward patch failed"; exit 1; }
make -j16 > $out/build.log 2>&1 && make -j16 check TESTS= > $out/build-tests.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(cat $out/build.log $out/build-tests.log | grep -c 'warning:')"
modes new
for s in launch_abort_ipc.sh launch_abort_ucx.sh; do
  tests/gpu/$s > $out/$s.log 2>&1
  echo "$s: exit $?"; grep -h 'test_abort:' $out/$s.log | sed 's/^/   /'
done
