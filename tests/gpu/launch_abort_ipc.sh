#!/bin/sh
# launch_abort_ipc.sh - ncclCommAbort while the rank's stream waits for a
# peer of the same host that is alive but never sends, over CUDA IPC
# (tests/gpu/test_abort.c), for a receive, for a one-sided signal (also
# with the peer's stream waiting for a signal of this rank: released before
# the peer aborts), and for a receive while the peer's stream waits in a
# CUDA graph's replays: the abort returns, the stream is released, the peer
# hears of it through ncclCommGetAsyncError (and its own abort releases its
# stream).
d=$(dirname "$0")
"$d/fault_launch.sh" test_abort || exit $?
"$d/fault_launch.sh" test_abort TEST_ABORT_WAIT=signal || exit $?
"$d/fault_launch.sh" test_abort TEST_ABORT_WAIT=signals || exit $?
"$d/fault_launch.sh" test_abort TEST_ABORT_WAIT=graph_signal || exit $?
exec "$d/fault_launch.sh" test_abort TEST_ABORT_WAIT=graph
