#!/bin/sh
# fault_launch.sh PROGRAM [VAR=value ...] - runs tests/gpu/PROGRAM, a fault
# test, on 2 ranks under mpirun --enable-recovery (a rank may be killed), with
# the variables set and exported to both ranks; passes when the output has
# "PROGRAM: ...: ok", skips (77) on "PROGRAM: no GPU: SKIP".  The wrappers
# tests/gpu/launch_fault_*.sh and launch_abort_*.sh call it; tests/run-test
# runs them directly once a GPU is found.
prog=$1
shift
top=${MPINCCL_TOP_BUILDDIR:-$(dirname "$0")/../..}
bin=$top/tests/gpu/$prog
[ -x "$bin" ] || { echo "fault_launch: $bin not built"; exit 99; }
flags=$("$(dirname "$0")/../run-test" --mpirun-flags)
exports=
for v in "$@"; do exports="$exports -x ${v%%=*}"; done
log=$(mktemp)
# shellcheck disable=SC2086
env "$@" timeout 120 ${MPINCCL_MPIRUN:-mpirun} -np 2 $flags --enable-recovery $exports "$bin" 2>&1 |
  grep -v -e 'PMIX ERROR' -e '^ *$' | tee "$log"
grep -q "$prog: .*: ok\$" "$log"
status=$?
grep -q "$prog: no GPU: SKIP" "$log" && status=77
rm -f "$log"
exit $status
