#!/bin/sh
# launch_put_lost.sh - one-sided puts over UCX whose data put fails on the
# sending side (tests/gpu/test_put_lost.c): the receiver's wait ends and both
# ranks report ncclRemoteError.
exec "$(dirname "$0")/fault_launch.sh" test_put_lost MPINCCL_TRANSPORT=ucx MPINCCL_UCX_CHUNK=65536
