#!/bin/sh
# test_rma_ucx.sh - tests/gpu/test_rma with the UCX path forced: windows
# mirrored in host memory, puts staged through pinned buffers, signals
# carrying descriptors (src/ucx/winstage.c); 2 and 4 processes.
[ "${1:-}" = --np-list ] && { echo "2 4"; exit 0; }
# Every peer of another process on the UCX path.
exec env MPINCCL_TRANSPORT=ucx "$(dirname "$0")/gpu_program.sh" test_rma "$@"
