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
 *
 * With receive buffers (--ipc-exchange), the same with the data: before its
 * flags, each rank copies its faces (cudaMemcpyAsync) into its neighbours'
 * receive buffers through CUDA IPC.  Each rank has two, used in turn, so one
 * hop is enough: a rank writes a buffer again two synchronizations later,
 * after its neighbour's flag of the one between, which the neighbour wrote
 * after unpacking the buffer.  What plain CUDA pays for the exchange.
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
 * value for none.  recv_bytes > 0: also two receive buffers of that size
 * (zeroed) that the neighbours write.  On failure every rank gets NULL and
 * why says what failed (stream memory operations missing, CUDA IPC
 * refused, a neighbour on another node).
 */
halo_flags_t* halo_flags_open(MPI_Comm comm, const int nbr[HALO_FACES], size_t recv_bytes, char* why,
                              size_t whylen);

/** Face f's data for a neighbour: copied to byte dst_off of its receive buffer. */
typedef struct {
  const void* src;
  size_t bytes, dst_off;
} halo_face_copy_t;

/** Enqueues one synchronization on stream, after copying face f's data
 * (copy[f], for each face with a neighbour) when copy is not NULL (receive
 * buffers needed); cudaSuccess or the failure. */
cudaError_t halo_flags_sync(halo_flags_t* h, const halo_face_copy_t* copy, cudaStream_t stream);

/** The receive buffer the last synchronization filled. */
void* halo_flags_received(const halo_flags_t* h);

/** Collective; stream must have no synchronization of h left to run. */
void halo_flags_close(halo_flags_t* h);

#ifdef __cplusplus
}
#endif

#endif /* HALO3D_FLAGS_H_ */
