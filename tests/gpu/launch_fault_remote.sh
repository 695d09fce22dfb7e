#!/bin/sh
# launch_fault_remote.sh - a rank the library takes for another host (a
# /dev/shm of its own), killed while its peer waits for its signal
# (tests/gpu/test_fault_remote.c): UCX finds it gone, and the waiting rank
# hears of it.  MPI without its shared-memory transport, whose files the two
# ranks would not share; UCX over TCP, whose connection a dead peer drops.
flags=$("$(dirname "$0")/../run-test" --mpirun-flags |
  sed -e 's/self,vader,tcp/self,tcp/' -e 's/--mca btl_vader_single_copy_mechanism none//')
MPINCCL_MPIRUN_FLAGS=$flags
export MPINCCL_MPIRUN_FLAGS
exec "$(dirname "$0")/fault_launch.sh" test_fault_remote UCX_TLS=tcp,self MPINCCL_NET_TIMEOUT=3
