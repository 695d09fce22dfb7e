#!/bin/sh
# gpu_program.sh PROGRAM [ARGS] - runs tests/gpu/PROGRAM of the build tree,
# which is this script's directory unless the build is out of the source
# tree (make check exports its top).  The wrappers tests/gpu/test_*_*.sh
# call it with the environment they test, as tests/run-test runs them under
# mpirun.
prog=$1
shift
bin=${MPINCCL_TOP_BUILDDIR:+$MPINCCL_TOP_BUILDDIR/tests/gpu/$prog}
[ -n "$bin" ] && [ -x "$bin" ] || bin=$(dirname "$0")/$prog
exec "$bin" "$@"
