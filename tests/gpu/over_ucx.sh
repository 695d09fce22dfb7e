#!/bin/sh
# over_ucx.sh PROGRAM [ARGS] - runs tests/gpu/PROGRAM with every peer of
# another process on the UCX path (MPINCCL_TRANSPORT=ucx); the wrappers
# test_*_ucx.sh call it, as tests/run-test runs them under mpirun.
prog=$1
shift
MPINCCL_TRANSPORT=ucx
export MPINCCL_TRANSPORT
# The program is in the build tree (make check exports its top), which is
# this script's directory unless the build is out of the source tree.
bin=${MPINCCL_TOP_BUILDDIR:+$MPINCCL_TOP_BUILDDIR/tests/gpu/$prog}
[ -n "$bin" ] && [ -x "$bin" ] || bin=$(dirname "$0")/$prog
exec "$bin" "$@"
