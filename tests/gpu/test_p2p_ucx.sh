#!/bin/sh
# test_p2p_ucx.sh - tests/gpu/test_p2p with the UCX path forced: device
# data staged through pinned host buffers (src/ucx/staged.c); 2 and 4
# processes.
[ "${1:-}" = --np-list ] && { echo "2 4"; exit 0; }
# Every peer of another process on the UCX path.
exec env MPINCCL_TRANSPORT=ucx "$(dirname "$0")/gpu_program.sh" test_p2p "$@"
