#!/bin/sh
# launch_fault_ucx.sh - a rank killed in the middle of a staged transfer of
# device memory over UCX (tests/gpu/test_fault_ucx.c): the other rank hears
# of it within the network timeout, and abort returns promptly.  Launches
# mpirun itself (it needs --enable-recovery); tests/run-test runs it
# directly once a GPU is found.
top=${MPINCCL_TOP_BUILDDIR:-$(dirname "$0")/../..}
prog=$top/tests/gpu/test_fault_ucx
[ -x "$prog" ] || { echo "launch_fault_ucx: $prog not built"; exit 99; }
flags=$("$(dirname "$0")/../run-test" --mpirun-flags)
log=$(mktemp)
# shellcheck disable=SC2086
MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3 timeout 120 ${MPINCCL_MPIRUN:-mpirun} -np 2 $flags \
  --enable-recovery -x MPINCCL_TRANSPORT -x MPINCCL_NET_TIMEOUT "$prog" 2>&1 |
  grep -v -e 'PMIX ERROR' -e '^ *$' | tee "$log"
grep -q 'test_fault_ucx: .*: ok$' "$log"
status=$?
grep -q 'test_fault_ucx: no GPU: SKIP' "$log" && status=77
rm -f "$log"
exit $status
