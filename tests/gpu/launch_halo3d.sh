#!/bin/sh
# launch_halo3d.sh - examples/halo3d as a test: its two-sided exchange and
# its --put variant, with fixed and periodic boundaries, at 1, 2 and 4 ranks
# (MPINCCL_TEST_NP narrows them) on a small grid; each run compares its field
# with a one-block reference and must print "check: ... (PASS)".  MPI's
# process grid splits x first (2x1x1, 2x2x1), so at 2 and 4 ranks the runs
# are repeated on a grid split along z, whose faces then cross ranks too.
top=${MPINCCL_TOP_BUILDDIR:-$(dirname "$0")/../..}
bin=$top/examples/halo3d
[ -x "$bin" ] || { echo "launch_halo3d: $bin not built"; exit 99; }
flags=$("$(dirname "$0")/../run-test" --mpirun-flags)
. "$(dirname "$0")/example_check.sh"
status=0
for np in ${MPINCCL_TEST_NP:-1 2 4}; do
  case $np in
  2) grids="auto 1,1,2" ;;
  4) grids="auto 1,2,2" ;;
  *) grids=auto ;;
  esac
  for grid in $grids; do
    g=
    [ "$grid" = auto ] || g="-p $grid"
    for mode in "" --put "--periodic" "--periodic --put"; do
      # shellcheck disable=SC2086 # flags, g and mode are words
      example_check launch_halo3d "np $np $g ${mode:-(two-sided)}" \
        ${MPINCCL_MPIRUN:-mpirun} -np "$np" $flags "$bin" -n 40,36,32 -i 20 -w 3 $g $mode
    done
  done
done
exit $status
