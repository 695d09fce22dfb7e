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
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../fault.h"
#include "mpinccl.h"

/* Polls until the stream has nothing left (1) or limit seconds pass (0). */
static int stream_drains(cudaStream_t s, double limit) {
  double t = fault_now();
  while (cudaStreamQuery(s) == cudaErrorNotReady && fault_now() - t < limit) usleep(1000);
  return cudaStreamQuery(s) != cudaErrorNotReady;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, ndev = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (rank == 0) printf("test_fault_ucx: no GPU: SKIP\n");
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(rank % ndev);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  ncclComm_t comm = NULL;
  if (mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess) {
    fprintf(stderr, "rank %d: creation failed: %s\n", rank, ncclGetLastError(NULL));
    return 1;
  }
  size_t bytes = (size_t)256 << 20;
  char* buf = NULL;
  if (cudaMalloc((void**)&buf, bytes) != cudaSuccess) return 1;
  /* Both directions once first, so that the endpoints are wired up before
   * the peer dies (UCX can abort in wire-up when the other side vanishes). */
  int peer = 1 - rank;
  ncclGroupStart();
  ncclSend(buf, 4096, ncclInt8, peer, comm, stream);
  ncclRecv(buf + 4096, 4096, ncclInt8, peer, comm, stream);
  if (ncclGroupEnd() != ncclSuccess || cudaStreamSynchronize(stream) != cudaSuccess) {
    fprintf(stderr, "rank %d: the warm-up exchange failed: %s\n", rank, ncclGetLastError(comm));
    return 1;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    ncclSend(buf, bytes, ncclInt8, 0, comm, stream);
    usleep(20000); /* the transfer is under way */
    raise(SIGKILL);
  }
  ncclResult_t posted = ncclRecv(buf, bytes, ncclInt8, 1, comm, stream);
  double seen = 0;
  ncclResult_t async = fault_wait_async(comm, 30, &seen);
  int drained = stream_drains(stream, 10);
  double t0 = fault_now();
  ncclResult_t aborted = ncclCommAbort(comm);
  double abort_s = fault_now() - t0;
  int ok = posted == ncclSuccess && (async == ncclRemoteError || async == ncclTimeout) && seen < 8 && /* MPINCCL_NET_TIMEOUT 3 s, and slack */
           drained && aborted == ncclSuccess && abort_s < 5;
  printf("test_fault_ucx: rank 0 saw %s after %.1f s (%s), stream %s, abort took %.2f s: %s\n",
         ncclGetErrorString(async), seen, ncclGetLastError(NULL), drained ? "released" : "still blocked",
         abort_s, ok ? "ok" : "FAIL");
  fflush(stdout);
  _exit(ok ? 0 : 1);
}
