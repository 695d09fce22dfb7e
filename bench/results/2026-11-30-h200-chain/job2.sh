#!/usr/bin/env bash
# compute-sanitizer memcheck on test_p2p's chain_three, 3 processes, no MPS.
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
TEST_P2P_ONLY=chain_three timeout 150 mpirun -np 3 $flags -x TEST_P2P_ONLY \
  "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/test_p2p >"$out/sanitizer.log" 2>&1
echo "   exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log") ranks with 0 errors"
