/*
 * test_fault_ucx.c - run by launch_fault_ucx.sh with two ranks on the GPU and
 * the UCX path forced: rank 1 is killed while it sends 256 MiB of device
 * memory to rank 0 (staged through pinned host memory).  Rank 0 must see
 * ncclRemoteError or ncclTimeout from ncclCommGetAsyncError within the
 * network timeout (MPINCCL_NET_TIMEOUT, 3 s in the script), its stream must
 * not stay blocked by the lost receive, and ncclCommAbort must return
 * promptly.  Rank 0 then leaves without MPI_Finalize (its peer is gone; the
 * job runs with --enable-recovery).  Prints one line ending in "ok" or
 * "FAIL".
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fault_gpu.h"

int main(int argc, char** argv) {
  fault_gpu_t f;
  int rc = fault_gpu_start("test_fault_ucx", &argc, &argv, &f);
  if (rc != 0) return rc;
  size_t bytes = (size_t)256 << 20;
  char* buf = NULL;
  if (cudaMalloc((void**)&buf, bytes) != cudaSuccess) return 1;
  /* Both directions once first, so that the endpoints are wired up before
   * the peer dies (UCX can abort in wire-up when the other side vanishes). */
  int peer = 1 - f.rank;
  ncclGroupStart();
  ncclSend(buf, 4096, ncclInt8, peer, f.comm, f.stream);
  ncclRecv(buf + 4096, 4096, ncclInt8, peer, f.comm, f.stream);
  if (ncclGroupEnd() != ncclSuccess || cudaStreamSynchronize(f.stream) != cudaSuccess) {
    fprintf(stderr, "rank %d: the warm-up exchange failed: %s\n", f.rank, ncclGetLastError(f.comm));
    return 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (f.rank == 1) {
    ncclSend(buf, bytes, ncclInt8, 0, f.comm, f.stream);
    usleep(20000); /* the transfer is under way */
    raise(SIGKILL);
  }
  ncclResult_t posted = ncclRecv(buf, bytes, ncclInt8, 1, f.comm, f.stream);
  double seen = 0;
  ncclResult_t async = fault_wait_async(f.comm, 30, &seen);
  cudaError_t drained = fault_stream_drain(f.stream, 10);
  double t0 = fault_now();
  ncclResult_t aborted = ncclCommAbort(f.comm);
  double abort_s = fault_now() - t0;
  int ok = posted == ncclSuccess && (async == ncclRemoteError || async == ncclTimeout) &&
           seen < 8 && /* MPINCCL_NET_TIMEOUT 3 s, and slack */
           drained == cudaSuccess && aborted == ncclSuccess && abort_s < 5;
  printf("test_fault_ucx: rank 0 saw %s after %.1f s (%s), stream %s, abort took %.2f s: %s\n",
         ncclGetErrorString(async), seen, ncclGetLastError(NULL),
         drained == cudaSuccess ? "released" : cudaGetErrorString(drained), abort_s, ok ? "ok" : "FAIL");
  fflush(stdout);
  _exit(ok ? 0 : 1);
}
