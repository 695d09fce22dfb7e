#!/usr/bin/env bash
# session 40, two GPUs: test_p2p whole at 2 processes (one per GPU) with
# held_sender holding the stream by a kernel; then the previous form (a
# host function that waits for the host) with IPC traces, to see whether
# its hang is a launch waiting at the closing thread's gate.
out=$1
step() { echo "== $(date +%T) $*"; }
[ -f Makefile ] || { (autoreconf -fi && ./configure -q) > $out/configure.log 2>&1 || exit 1; }
make -j32 > $out/build.log 2>&1 && make -j32 check TESTS= >> $out/build.log 2>&1 || { grep error $out/build.log | head; exit 1; }
echo "warnings: $(grep -c warning: $out/build.log)"
for np in 2 3 4; do
  step "test_p2p np=$np whole"
  MPINCCL_TEST_NP=$np MPINCCL_TEST_TIMEOUT=200 tests/run-test ./tests/gpu/test_p2p > $out/p2p-np$np.log 2>&1
  echo "exit $? :: $(grep -h 'failures$' $out/p2p-np$np.log)"; grep -h 'expected\|timed out' $out/p2p-np$np.log | head -5
done
step "one GPU (CUDA_VISIBLE_DEVICES=0): empty_messages at 1, 2, 3, 4, 8"
CUDA_VISIBLE_DEVICES=0 TEST_P2P_ONLY=empty_messages MPINCCL_TEST_NP="1 2 3 4 8" tests/run-test ./tests/gpu/test_p2p > $out/p2p-1gpu.log 2>&1
echo "exit $? :: $(grep -h 'failures$' $out/p2p-1gpu.log | tr '\n' ' ')"
step "previous held_sender, traced"
cp tests/gpu/test_p2p.c /tmp/new_test_p2p.c; cp .device/s40-old-test_p2p.c tests/gpu/test_p2p.c
make -j32 check TESTS= > /dev/null 2>&1
MPINCCL_TEST_NP=2 MPINCCL_TEST_TIMEOUT=100 MPINCCL_MPIRUN_FLAGS="$(tests/run-test --mpirun-flags) -x NCCL_DEBUG=TRACE -x NCCL_DEBUG_SUBSYS=IPC" NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=IPC tests/run-test ./tests/gpu/test_p2p > $out/old-traced.log 2>&1
echo "exit $? :: $(grep -h 'failures$\|timed out' $out/old-traced.log)"
grep -n 'empty_messages\|scatter_gather' $out/old-traced.log | head
awk '/scatter_gather.*done/{f=1} f' $out/old-traced.log | grep -E 'closing|closed' | tail -8
cp /tmp/new_test_p2p.c tests/gpu/test_p2p.c
step done
