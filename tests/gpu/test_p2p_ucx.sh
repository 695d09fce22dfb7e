#!/bin/sh
# test_p2p_ucx.sh - tests/gpu/test_p2p with every peer of another process on
# the UCX path (MPINCCL_TRANSPORT=ucx): device data staged through pinned
# host buffers (src/ucx/staged.c).  Run by tests/run-test under mpirun like
# the GPU programs; 2 and 4 processes.
if [ "${1:-}" = --np-list ]; then
  echo "2 4"
  exit 0
fi
MPINCCL_TRANSPORT=ucx
export MPINCCL_TRANSPORT
# The program is in the build tree (make check exports its top), which is
# this script's directory unless the build is out of the source tree.
bin=${MPINCCL_TOP_BUILDDIR:+$MPINCCL_TOP_BUILDDIR/tests/gpu/test_p2p}
[ -n "$bin" ] && [ -x "$bin" ] || bin=$(dirname "$0")/test_p2p
exec "$bin" "$@"
