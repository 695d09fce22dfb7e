/*
 * halo3d_flags.h - the reference synchronization of examples/halo3d
 * (--flag-sync): stream-ordered, flag-only, between neighbours, with plain
 * CUDA and MPI (no mpinccl).  Every rank owns one 64-bit flag per face in a
 * cudaMalloc region that its neighbours map through CUDA IPC.  One
 * synchronization, on each rank's stream: write the flag of the face facing
 * this rank in every neighbour's region (cuStreamWriteValue64, ordered after
 * the packing before it), then wait until every own flag of a face with a
 * neighbour reached the same count (cuStreamWaitValue64).  That is the
 * exchange without its data: one flag hop, the least any exchange between
 * ranks of one GPU can cost.  The neighbours must be on this rank's node.
 */
#ifndef HALO3D_FLAGS_H_
#define HALO3D_FLAGS_H_

#include <cuda_runtime.h>
#include <mpi.h>
#include <stddef.h>

#include "halo3d_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct halo_flags halo_flags_t;

/**
 * Collective over comm.  nbr[f]: the rank across face f, or a negative
 * value for none.  On failure every rank gets NULL and why says what failed
 * (stream memory operations missing, CUDA IPC refused, a neighbour on
 * another node).
 */
halo_flags_t* halo_flags_open(MPI_Comm comm, const int nbr[HALO_FACES], char* why, size_t whylen);

/** Enqueues one synchronization on stream; cudaSuccess or the failure. */
cudaError_t halo_flags_sync(halo_flags_t* h, cudaStream_t stream);

/** Collective; stream must have no synchronization of h left to run. */
void halo_flags_close(halo_flags_t* h);

#ifdef __cplusplus
}
#endif

#endif /* HALO3D_FLAGS_H_ */
