#!/bin/sh
# launch_fault_ucx.sh - a rank killed in the middle of a staged transfer of
# device memory over UCX (tests/gpu/test_fault_ucx.c): the other rank hears
# of it within the network timeout, and abort returns promptly.
exec "$(dirname "$0")/fault_launch.sh" test_fault_ucx MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3
