#!/bin/sh
# launch_abort_ucx.sh - launch_abort_ipc.sh's aborts with the UCX path forced:
# the stream waits for a staged receive or a signal, the abort cancels what
# the proxy holds, lets the stream go and tells the peer, whose waits for
# the aborting rank's signals are let go too, and whose replays of a graph
# (a captured send, or a captured wait for a signal) its own abort releases
# (tests/gpu/test_abort.c).
d=$(dirname "$0")
"$d/fault_launch.sh" test_abort MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3 || exit $?
"$d/fault_launch.sh" test_abort MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3 TEST_ABORT_WAIT=signals || exit $?
"$d/fault_launch.sh" test_abort MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3 TEST_ABORT_WAIT=graph_signal || exit $?
"$d/fault_launch.sh" test_abort MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3 TEST_ABORT_WAIT=graph || exit $?
exec "$d/fault_launch.sh" test_abort MPINCCL_TRANSPORT=ucx MPINCCL_NET_TIMEOUT=3 TEST_ABORT_WAIT=signal
