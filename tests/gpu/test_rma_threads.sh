#!/bin/sh
# test_rma_threads.sh - tests/gpu/test_rma's steps with threads alone, in a
# fresh process: the library's kernels are then loaded by nothing but its
# own set-up (src/cuda/kernels.c; loaded at a first launch instead, the
# first put of such a process hung); 1 and 2 processes.
[ "${1:-}" = --np-list ] && { echo "1 2"; exit 0; }
exec env TEST_RMA_ONLY=threads_ "$(dirname "$0")/gpu_program.sh" test_rma "$@"
