#!/usr/bin/env bash
# Twenty-fourth session, call 2: the fix of the self-signal elision found by
# a desk review (a stand-in written before the stream's wait for the
# previous count of another stream). test_rma's self_ steps, the new
# self_after_other among them, at 2, 4 and 8 processes; the fix taken out
# (scratch) must fail self_after_other; the whole of test_rma at 1, 2, 4;
# the 8-rank barrier without MPS, 3 jobs, with the elision and without.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
echo "== without the fix (scratch): self_after_other must fail"
cp src/rma/self.c /tmp/self.c.orig
sed -i 's/if (sent0 > 0 \&\& comm->rma->sent_stream\[pc\] != sid) return;/(void)sid;/' src/rma/self.c
if cmp -s src/rma/self.c /tmp/self.c.orig; then echo "   the mutation did not apply"; fi
make -j16 tests/gpu/test_rma >/dev/null 2>&1 || echo "   build failed"
TEST_RMA_ONLY=self_after_other MPINCCL_TEST_TIMEOUT=40 MPINCCL_TEST_NP="2 4" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" \
  tests/run-test ./tests/gpu/test_rma >"$out/mut-nofix.log" 2>&1
echo "   exit $?"; grep -m 4 -E "wrong|FAIL|timeout|timed out" "$out/mut-nofix.log"
cp /tmp/self.c.orig src/rma/self.c
make -j16 tests/gpu/test_rma >/dev/null 2>&1
echo "== as landed: self_ steps at 2, 4, 8"
TEST_RMA_ONLY=self_ MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP="2 4 8" MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" \
  tests/run-test ./tests/gpu/test_rma >"$out/self-steps.log" 2>&1
echo "   exit $?"
echo "== as landed: all of test_rma at 1, 2, 4"
MPINCCL_TEST_NP="1 2 4" tests/run-test ./tests/gpu/test_rma >"$out/test_rma.log" 2>&1
echo "   exit $?"
echo "== barrier, 8 ranks, no MPS"
for e in 1 0 1 0 1 0; do
  line=$(MPINCCL_RMA_SELF_ELIDE=$e timeout 60 mpirun -np 8 $flags -x MPINCCL_RMA_SELF_ELIDE ./bench/mpinccl_bench -o barrier -n 1000 -w 100 2>&1 |
    grep -E '^ +[0-9]+ +[0-9.]+ ' | head -n 1)
  echo "   elide=$e: ${line:-failed}"
done | tee "$out/barrier.txt"
tar czf "$out/logs.tgz" -C "$out" $(cd "$out" && ls *.log)
