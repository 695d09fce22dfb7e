#!/bin/sh
# test_p2p_threads.sh - tests/gpu/test_p2p's steps with threads, alone in a
# fresh process (threads_alone.sh); 1 and 2 processes.
[ "${1:-}" = --np-list ] && { echo "1 2"; exit 0; }
exec "$(dirname "$0")/threads_alone.sh" test_p2p "$@"
