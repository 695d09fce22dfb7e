#!/bin/sh
# launch_abort_ipc.sh - ncclCommAbort while the rank's stream waits for a
# peer of the same host that is alive but never sends, over CUDA IPC
# (tests/gpu/test_abort.c), for a receive and for a one-sided signal: the
# abort returns, the stream is released, the peer hears of it through
# ncclCommGetAsyncError.
d=$(dirname "$0")
"$d/fault_launch.sh" test_abort || exit $?
exec "$d/fault_launch.sh" test_abort TEST_ABORT_WAIT=signal
