#!/bin/sh
# launch_abort_ipc.sh - ncclCommAbort while the rank's stream waits for a
# peer of the same host that is alive but never sends (tests/gpu/
# test_abort_ipc.c): the abort returns, the stream is released, the peer
# hears of it through ncclCommGetAsyncError.
exec "$(dirname "$0")/fault_launch.sh" test_abort_ipc
