/*
 * fault_gpu.h - what the GPU fault tests share (tests/gpu/test_fault_*.c):
 * their set-up on two ranks and the check that a stream left waiting for a
 * dead peer is released.
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

/* Polls until the stream has nothing left or limit seconds pass; returns
 * its last cudaStreamQuery (cudaSuccess: released, and without error). */
static inline cudaError_t fault_stream_drain(cudaStream_t s, double limit) {
  double t = fault_now();
  while (cudaStreamQuery(s) == cudaErrorNotReady && fault_now() - t < limit) usleep(1000);
  return cudaStreamQuery(s);
}

#endif /* MPN_TESTS_FAULT_GPU_H_ */
