#!/bin/sh
# launch_fault_ipc.sh - a rank of the same host killed while its peer waits
# for it over CUDA IPC, the pair's shared flags in the dead rank's memory
# (tests/gpu/test_fault_ipc.c): the survivor hears of it from the watchdog,
# its stream is released, its CUDA context still works.
exec "$(dirname "$0")/fault_launch.sh" test_fault_ipc MPINCCL_WATCHDOG_MS=200
