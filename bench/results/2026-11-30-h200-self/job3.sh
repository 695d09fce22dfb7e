#!/usr/bin/env bash
# Third call of the session: compute-sanitizer memcheck on test_rma's steps
# that a rank's signals to itself take (self_lag, self_order,
# self_early_wait) and its barrier, 2 ranks, without MPS.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_rma >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for only in self_ barrier; do
  TEST_RMA_ONLY=$only timeout 240 mpirun -np 2 $flags -x TEST_RMA_ONLY \
    "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/test_rma \
    >"$out/sanitizer-$only.log" 2>&1
  echo "   $only: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer-$only.log") ranks with 0 errors"
done
