#!/usr/bin/env bash
# session 48, call 2: the abort before the rendezvous (65c7274): build, then
# test_comm_local five times on the GPU machine (its abort test's timing
# differs there: the device's first context takes long), with NCCL_DEBUG=INFO
# for the bootstrap to show which path each run took.
out=$1
mkdir -p $out
[ -f Makefile ] || (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1
make -j16 > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
make -j16 tests/unit/test_comm_local >> $out/build.log 2>&1
echo "warnings: $(grep -c 'warning:' $out/build.log)"
for i in 1 2 3 4 5; do
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=BOOTSTRAP timeout 300 tests/unit/test_comm_local > $out/comm_local-$i.log 2>&1
  echo "run $i rc=$? :: $(grep -h 'Checks' $out/comm_local-$i.log) :: $(grep -c 'aborted before it joined' $out/comm_local-$i.log) before, $(grep -c 'left before the rendezvous' $out/comm_local-$i.log) withdrawn"
  grep -h ':F:\|:E:' $out/comm_local-$i.log | head -3
done
