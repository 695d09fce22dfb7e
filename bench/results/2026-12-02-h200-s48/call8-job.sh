#!/usr/bin/env bash
# session 48, call 8: the review's fixes (the final library source): build,
# the remote fault test twice, the UCX fault and abort tests, test_rma over UCX.
out=$1
mkdir -p $out
[ -f Makefile ] && grep -q test_fault_remote Makefile || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
make -j16 tests/gpu/test_fault_remote tests/gpu/test_fault_ucx tests/gpu/test_abort tests/gpu/gpu_probe tests/gpu/test_rma >> $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
echo "warnings: $(grep -c 'warning:' $out/build.log)"
for i in 1 2; do
  tests/run-test tests/gpu/launch_fault_remote.sh > $out/remote-$i.log 2>&1; echo "remote $i rc=$?"
  grep -h 'test_fault_remote:' $out/remote-$i.log | tail -1
done
for t in launch_fault_ucx.sh launch_abort_ucx.sh test_rma_ucx.sh; do
  MPINCCL_TEST_TIMEOUT=150 tests/run-test tests/gpu/$t > $out/$t.log 2>&1; echo "$t rc=$? :: $(grep -h ': ok$\|failures$' $out/$t.log | tail -2 | tr '\n' ' ')"
done
