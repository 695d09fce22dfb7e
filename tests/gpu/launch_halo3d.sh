#!/bin/sh
# launch_halo3d.sh - examples/halo3d as a test: its two-sided exchange and
# its --put variant, with fixed and periodic boundaries, at 1, 2 and 4 ranks
# (MPINCCL_TEST_NP narrows them) on a small grid; each run compares its field
# with a one-block reference and must print "check: ... (PASS)".
top=${MPINCCL_TOP_BUILDDIR:-$(dirname "$0")/../..}
bin=$top/examples/halo3d
[ -x "$bin" ] || { echo "launch_halo3d: $bin not built"; exit 99; }
flags=$("$(dirname "$0")/../run-test" --mpirun-flags)
. "$(dirname "$0")/example_check.sh"
status=0
for np in ${MPINCCL_TEST_NP:-1 2 4}; do
  for mode in "" --put "--periodic" "--periodic --put"; do
    # shellcheck disable=SC2086 # flags and mode are words
    example_check launch_halo3d "np $np ${mode:-(two-sided)}" \
      ${MPINCCL_MPIRUN:-mpirun} -np "$np" $flags "$bin" -n 40,36,32 -i 20 -w 3 $mode
  done
done
exit $status
