/*
 * fault_gpu.h - what the GPU fault tests share (tests/gpu/test_fault_*.c):
 * their set-up on two ranks, the check that a stream left waiting for a
 * peer is released, and that the CUDA context still works.
 */
#ifndef MPN_TESTS_FAULT_GPU_H_
#define MPN_TESTS_FAULT_GPU_H_

#include <cuda_runtime.h>
#include <stdio.h>
#include <unistd.h>

#include "../fault.h"
#include "mpinccl.h"

typedef struct {
  int rank;
  cudaStream_t stream;
  ncclComm_t comm;
} fault_gpu_t;

/*
 * MPI_Init, then on each of 2 ranks a device, a non-blocking stream and a
 * communicator over MPI_COMM_WORLD.  Returns 0, or the exit code after
 * saying why: 77 ("PROG: no GPU: SKIP", from rank 0) or 1.
 */
static inline int fault_gpu_start(const char* prog, int* argc, char*** argv, fault_gpu_t* f) {
  int size, ndev = 0;
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &f->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (f->rank == 0) printf("%s: no GPU: SKIP\n", prog);
    MPI_Finalize();
    return 77;
  }
  if (size != 2) {
    if (f->rank == 0) fprintf(stderr, "%s: needs 2 ranks, not %d\n", prog, size);
    MPI_Finalize();
    return 1;
  }
  f->comm = NULL;
  if (cudaSetDevice(f->rank % ndev) != cudaSuccess ||
      cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "%s: rank %d: no stream on device %d\n", prog, f->rank, f->rank % ndev);
    return 1;
  }
  if (mpincclCommInitMPI(&f->comm, MPI_COMM_WORLD, NULL) != ncclSuccess) {
    fprintf(stderr, "%s: rank %d: creation failed: %s\n", prog, f->rank, ncclGetLastError(NULL));
    return 1;
  }
  return 0;
}

/* One exchange of bytes each way with peer on f's stream (buf holds both
 * halves); 1 when it was enqueued. */
static inline int fault_exchange(char* buf, size_t bytes, int peer, const fault_gpu_t* f) {
  ncclGroupStart();
  ncclSend(buf, bytes, ncclInt8, peer, f->comm, f->stream);
  ncclRecv(buf + bytes, bytes, ncclInt8, peer, f->comm, f->stream);
  return ncclGroupEnd() == ncclSuccess;
}

/*
 * One exchange between the two ranks, completed, creator posting first so
 * that the pair state (flags included) lives in its memory; the job is
 * aborted if it fails.
 */
static inline void fault_pair_setup(char* buf, size_t bytes, int creator, const fault_gpu_t* f) {
  int peer = 1 - f->rank, posted = f->rank == creator ? fault_exchange(buf, bytes, peer, f) : 1;
  MPI_Barrier(MPI_COMM_WORLD);
  if (f->rank != creator) posted = fault_exchange(buf, bytes, peer, f);
  if (!posted || cudaStreamSynchronize(f->stream) != cudaSuccess) {
    fprintf(stderr, "rank %d: the first exchange failed: %s\n", f->rank, ncclGetLastError(f->comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Polls until the stream has nothing left or limit seconds pass; returns
 * its last cudaStreamQuery (cudaSuccess: released, and without error). */
static inline cudaError_t fault_stream_drain(cudaStream_t s, double limit) {
  double t = fault_now();
  while (cudaStreamQuery(s) == cudaErrorNotReady && fault_now() - t < limit) usleep(1000);
  return cudaStreamQuery(s);
}

/* Whether the context still runs work: a fill of fresh memory on a fresh
 * stream, synchronized, reports no error. */
static inline int fault_context_works(void) {
  cudaStream_t s = NULL;
  void* p = NULL;
  int ok = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
           cudaMalloc(&p, 1 << 20) == cudaSuccess && cudaMemsetAsync(p, 7, 1 << 20, s) == cudaSuccess &&
           cudaStreamSynchronize(s) == cudaSuccess;
  if (p) ok &= cudaFree(p) == cudaSuccess;
  if (s) ok &= cudaStreamDestroy(s) == cudaSuccess;
  return ok && cudaGetLastError() == cudaSuccess;
}

#endif /* MPN_TESTS_FAULT_GPU_H_ */
