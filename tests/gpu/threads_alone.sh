#!/bin/sh
# threads_alone.sh PROGRAM [ARGS] - runs only the steps of tests/gpu/PROGRAM
# whose ranks of one process are driven by threads, in a process that ran
# nothing before them: the library's kernels are then loaded by nothing but
# the library's own set-up (src/cuda/kernels.c; loaded at a first launch
# instead, the first put or send of such a process hung).  The wrappers
# test_*_threads.sh call it, as tests/run-test runs them under mpirun.
prog=$1
shift
TEST_P2P_ONLY=threads_
TEST_RMA_ONLY=threads_
export TEST_P2P_ONLY TEST_RMA_ONLY
bin=${MPINCCL_TOP_BUILDDIR:+$MPINCCL_TOP_BUILDDIR/tests/gpu/$prog}
[ -n "$bin" ] && [ -x "$bin" ] || bin=$(dirname "$0")/$prog
exec "$bin" "$@"
