#!/usr/bin/env bash
# Twenty-fourth session, call 5: window_agreement against a scratch build
# that frees deregistered windows at once (its stale-handle part must
# fail), then the full run (run ah): bench/run-device.sh --no-variants.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
flags=$(tests/run-test --mpirun-flags)
cp src/rma/window.c /tmp/window.c.orig
sed -i 's/^  rma->retired\[k\] = w;/  rma->retired[k] = NULL;\n  win_free(w);/' src/rma/window.c
cmp -s src/rma/window.c /tmp/window.c.orig && echo "   the mutation did not apply"
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_rma >>"$out/build.log" 2>&1
TEST_RMA_ONLY=window_agreement MPINCCL_TEST_TIMEOUT=60 MPINCCL_TEST_NP=2 MPINCCL_MPIRUN_FLAGS="$flags -x TEST_RMA_ONLY" \
  tests/run-test ./tests/gpu/test_rma >"$out/mut-retire.log" 2>&1
echo "== windows freed at once: window_agreement exit $?"; grep -m 3 "expected" "$out/mut-retire.log"
cp /tmp/window.c.orig src/rma/window.c
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_rma >>"$out/build.log" 2>&1
bench/run-device.sh "$out/ah" --no-variants > "$out/ah-run.txt" 2>&1
echo "== run ah: exit $?"
tail -5 "$out/ah-run.txt"
