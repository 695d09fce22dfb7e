/*
 * test_fault_remote.c - run by launch_fault_remote.sh with two ranks on the
 * GPU: rank 1 makes a /dev/shm of its own before MPI starts (a mount
 * namespace), so that the library takes it for another host (UCX, and no
 * process of its to look up), then dies (SIGKILL) while rank 0's stream
 * waits for a signal from it that never comes.  Rank 0 must see
 * ncclRemoteError from ncclCommGetAsyncError, found by UCX (the endpoint
 * its wait asked for fails), its stream must be released, and
 * ncclCommAbort must return promptly.  Prints one line ending in "ok" or
 * "FAIL"; "no GPU: SKIP" where there is no GPU or no mount namespace.
 */
#define _GNU_SOURCE /* unshare */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "core/comm.h"
#include "fault_gpu.h"
#include "transport.h"

/* A /dev/shm of this process's own: 1 when made. */
static int private_shm(void) {
  return unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
         mount("none", "/dev/shm", "tmpfs", 0, NULL) == 0;
}

int main(int argc, char** argv) {
  const char* world_rank = getenv("OMPI_COMM_WORLD_RANK");
  int apart = world_rank && atoi(world_rank) == 1 ? private_shm() : 1;
  fault_gpu_t f;
  int rc = fault_gpu_start("test_fault_remote", &argc, &argv, &f);
  if (rc != 0) return rc;
  int both = 0;
  MPI_Allreduce(&apart, &both, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!both) { /* (the same message as without a GPU: the launcher's skip) */
    if (f.rank == 0) printf("test_fault_remote: no GPU: SKIP (no mount namespace allowed here)\n");
    fflush(stdout);
    _exit(77);
  }
  int peer = 1 - f.rank;
  if (f.comm->transport[peer] != MPN_TRANSPORT_UCX) {
    printf("test_fault_remote: rank %d reaches rank %d by %s, not UCX: FAIL\n", f.rank, peer,
           mpn_transport_name(f.comm->transport[peer]));
    fflush(stdout);
    _exit(1);
  }
  void* mem = NULL;
  ncclWindow_t win = NULL;
  if (ncclMemAlloc(&mem, 1 << 20) != ncclSuccess ||
      ncclCommWindowRegister(f.comm, mem, 1 << 20, &win, NCCL_WIN_DEFAULT) != ncclSuccess) {
    fprintf(stderr, "rank %d: no window: %s\n", f.rank, ncclGetLastError(f.comm));
    return 1;
  }
  ncclResult_t posted = ncclSuccess;
  if (f.rank == 0) {
    ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = 1, .sigIdx = 0, .ctx = 0};
    posted = ncclWaitSignal(1, &d, f.comm, f.stream);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (f.rank == 1) {
    sleep(1); /* rank 0's endpoint to this rank is wired up meanwhile */
    raise(SIGKILL);
  }
  double seen = 0;
  ncclResult_t async = fault_wait_async(f.comm, 30, &seen);
  char text[256];
  snprintf(text, sizeof(text), "%s", ncclGetLastError(f.comm));
  cudaError_t drained = fault_stream_drain(f.stream, 10);
  double t0 = fault_now();
  ncclResult_t aborted = ncclCommAbort(f.comm);
  double abort_s = fault_now() - t0;
  int ok = posted == ncclSuccess && async == ncclRemoteError && strstr(text, "unreachable over UCX") && seen < 15 &&
           drained == cudaSuccess && aborted == ncclSuccess && abort_s < 5;
  printf("test_fault_remote: rank 0 saw %s after %.1f s (%s), stream %s, abort took %.2f s: %s\n",
         ncclGetErrorString(async), seen, text, drained == cudaSuccess ? "released" : cudaGetErrorString(drained),
         abort_s, ok ? "ok" : "FAIL");
  fflush(stdout);
  _exit(ok ? 0 : 1);
}
