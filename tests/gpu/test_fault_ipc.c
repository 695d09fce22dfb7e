/*
 * test_fault_ipc.c - run by launch_fault_ipc.sh with two ranks of one host
 * (CUDA IPC between them).  Rank 1 sets up the pair state first, so the
 * flags both ranks' streams wait on live in its device memory (docs/P2P.md,
 * known problem 9); then it is killed while rank 0's stream waits for a
 * message from it.  Rank 0 must see ncclRemoteError from
 * ncclCommGetAsyncError within a few watchdog periods, its stream must be
 * released, its CUDA context must still work, and ncclCommAbort must return
 * promptly.  Before the kill both ranks capture an exchange in a CUDA
 * graph and replay it once; after it, rank 0 replays it 3 times more: a
 * graph's waiter puts its flag back to 0, which undoes the watchdog's first
 * release, so each replay must be let go by the releases the watchdog
 * repeats.  Rank 0 then leaves without MPI_Finalize (its peer is gone; the
 * job runs with --enable-recovery).  Prints one line ending in "ok" or
 * "FAIL".
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fault_gpu.h"

enum { BYTES = 4096 };

int main(int argc, char** argv) {
  fault_gpu_t f;
  int rc = fault_gpu_start("test_fault_ipc", &argc, &argv, &f);
  if (rc != 0) return rc;
  char* buf = NULL;
  if (cudaMalloc((void**)&buf, 2 * BYTES) != cudaSuccess) return 1;
  fault_pair_setup(buf, BYTES, 1, &f); /* the flags in rank 1's memory */
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int peer = 1 - f.rank;
  int captured =
      cudaStreamBeginCapture(f.stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess &&
      ncclGroupStart() == ncclSuccess && ncclSend(buf, BYTES, ncclInt8, peer, f.comm, f.stream) == ncclSuccess &&
      ncclRecv(buf + BYTES, BYTES, ncclInt8, peer, f.comm, f.stream) == ncclSuccess && ncclGroupEnd() == ncclSuccess;
  captured = cudaStreamEndCapture(f.stream, &graph) == cudaSuccess && captured &&
             cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && cudaGraphLaunch(exec, f.stream) == cudaSuccess &&
             cudaStreamSynchronize(f.stream) == cudaSuccess;
  MPI_Barrier(MPI_COMM_WORLD);
  if (f.rank == 1) raise(SIGKILL);
  /* Rank 1 never posts its side: rank 0's stream waits for its flag. */
  ncclResult_t recv = ncclRecv(buf, BYTES, ncclInt8, 1, f.comm, f.stream);
  double seen = 0;
  ncclResult_t async = fault_wait_async(f.comm, 30, &seen);
  cudaError_t drained = fault_stream_drain(f.stream, 10);
  int replays = 0;
  for (int k = 0; k < 3 && captured && drained == cudaSuccess; k++)
    replays += cudaGraphLaunch(exec, f.stream) == cudaSuccess && fault_stream_drain(f.stream, 10) == cudaSuccess;
  int works = fault_context_works();
  char why[256];
  snprintf(why, sizeof(why), "%s", ncclGetLastError(f.comm)); /* before the abort frees comm */
  double t0 = fault_now();
  ncclResult_t aborted = ncclCommAbort(f.comm);
  double abort_s = fault_now() - t0;
  int ok = recv == ncclSuccess && async == ncclRemoteError && seen < 5 && drained == cudaSuccess && captured &&
           replays == 3 && works && aborted == ncclSuccess && abort_s < 5;
  printf(
      "test_fault_ipc: rank 0 saw %s after %.1f s (%s), stream %s, graph %s, %d of 3 replays after it released, "
      "context %s, abort took %.2f s: %s\n",
      ncclGetErrorString(async), seen, why, drained == cudaSuccess ? "released" : cudaGetErrorString(drained),
      captured ? "captured" : "not captured", replays, works ? "works" : "broken", abort_s, ok ? "ok" : "FAIL");
  fflush(stdout);
  _exit(ok ? 0 : 1);
}
