#!/usr/bin/env bash
# Twenty-ninth session: compute-sanitizer (memcheck) on every step of
# test_rma and on test_p2p's graph steps, 2 ranks on one GPU
# without MPS (run-device.sh covers only test_p2p's first steps).  Memory
# accesses only, as in run-device.sh (the import cache's
# cudaErrorAlreadyMapped is an API error the library handles).
set -u
out=${1:?outdir}
mkdir -p "$out"
source .device/setup.sh
( [ -f Makefile ] || (autoreconf -fi && ./configure -q) ) >"$out/build.log" 2>&1
make -j16 >>"$out/build.log" 2>&1 && make -j16 tests/gpu/test_p2p tests/gpu/test_rma >>"$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
flags=$(tests/run-test --mpirun-flags)
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run() { # label test only-filter
  local label=$1 t=$2 sel=$3 var
  var=$([ "$t" = test_p2p ] && echo TEST_P2P_ONLY || echo TEST_RMA_ONLY)
  env $var="$sel" timeout ${TLIMIT:-200} mpirun -np 2 $flags -x $var \
    "$san" --tool memcheck --report-api-errors no --error-exitcode 9 ./tests/gpu/$t >"$out/$label.log" 2>&1
  echo "== $label: exit $?; $(grep -c 'ERROR SUMMARY: 0 errors' "$out/$label.log") ranks with 0 errors"
  grep -E "ranks, |ERROR SUMMARY" "$out/$label.log" | head -4
}
run rma-all test_rma ""
TLIMIT=120 run p2p-graph test_p2p "graph_"
