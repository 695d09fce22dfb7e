/*
 * mpi_probe.h - what the plain-CUDA probes of bench/ that run under MPI
 * (ipc_copies.cu, ipc_close.cu) share: this process's rank, and CK, which
 * ends the whole job on a failed CUDA runtime call, naming it.
 */
#ifndef MPN_BENCH_MPI_PROBE_H_
#define MPN_BENCH_MPI_PROBE_H_

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstdio>

/* This process's rank in MPI_COMM_WORLD (set by main). */
static int rank;

#define CK(x)                                                       \
  do {                                                              \
    cudaError_t e = (x);                                            \
    if (e) {                                                        \
      printf("rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                 \
    }                                                               \
  } while (0)

#endif /* MPN_BENCH_MPI_PROBE_H_ */
