#!/usr/bin/env bash
# without the library change of cd8260f (its test kept): the test must fail
out=$1; mkdir -p $out
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
make -j16 tests/gpu/test_fault_remote >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
tests/run-test tests/gpu/launch_fault_remote.sh > $out/remote-before.log 2>&1; echo "remote (library before the change) rc=$?"
grep -h 'test_fault_remote:' $out/remote-before.log | tail -2
