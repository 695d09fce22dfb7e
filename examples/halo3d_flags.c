/*
 * halo3d_flags.c - flag-only synchronization between neighbours
 * (halo3d_flags.h).  The stream memory operations come from
 * cudaGetDriverEntryPointByVersion, so nothing links libcuda.
 */
#include "halo3d_flags.h"

#include <cuda.h> /* types and constants only */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CUDART_VERSION < 12050
#error "halo3d_flags.c needs CUDA 12.5 or later (cudaGetDriverEntryPointByVersion)"
#endif

enum { FLAG_STRIDE = 64, REGION_BYTES = 4096 }; /* one flag per face, each on its own line */

typedef CUresult (*memop64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

struct halo_flags {
  MPI_Comm comm;
  int nbr[HALO_FACES];
  char* mine;                /* own region */
  char* theirs[HALO_FACES];  /* nbr[f]'s region, mapped (mine for itself), NULL without one */
  memop64_fn write64, wait64;
  uint64_t count;            /* synchronizations enqueued; every rank counts alike */
};

static int load_memops(halo_flags_t* h) {
  enum cudaDriverEntryPointQueryResult q1, q2;
  cudaError_t e1 = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", (void**)&h->write64,
                                                    12000, cudaEnableDefault, &q1);
  cudaError_t e2 = cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", (void**)&h->wait64,
                                                    12000, cudaEnableDefault, &q2);
  int ok = e1 == cudaSuccess && e2 == cudaSuccess && q1 == cudaDriverEntryPointSuccess &&
           q2 == cudaDriverEntryPointSuccess && h->write64 && h->wait64;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

/* World rank of the first rank of each rank's node, for every rank of comm. */
static int* node_leaders(MPI_Comm comm, int size) {
  MPI_Comm node;
  int me, leader;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  leader = me;
  MPI_Bcast(&leader, 1, MPI_INT, 0, node);
  MPI_Comm_free(&node);
  int* all = malloc((size_t)size * sizeof(int));
  if (all == NULL) MPI_Abort(comm, 1);
  MPI_Allgather(&leader, 1, MPI_INT, all, 1, MPI_INT, comm);
  return all;
}

/* Maps the neighbours' regions; 1 on success, else why is set. */
static int map_neighbours(halo_flags_t* h, int me, int size, char* why, size_t whylen) {
  int* leaders = node_leaders(h->comm, size);
  cudaIpcMemHandle_t mine;
  cudaIpcMemHandle_t* all = malloc((size_t)size * sizeof(mine));
  if (all == NULL) MPI_Abort(h->comm, 1);
  cudaError_t err = cudaIpcGetMemHandle(&mine, h->mine);
  if (err != cudaSuccess) memset(&mine, 0, sizeof(mine));
  MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, h->comm);
  int ok = err == cudaSuccess;
  if (!ok) snprintf(why, whylen, "cudaIpcGetMemHandle: %s", cudaGetErrorString(err));
  for (int f = 0; ok && f < HALO_FACES; f++) {
    int n = h->nbr[f];
    if (n < 0) continue;
    if (n == me) {
      h->theirs[f] = h->mine;
      continue;
    }
    if (leaders[n] != leaders[me]) {
      snprintf(why, whylen, "neighbour %d is on another node (CUDA IPC reaches this node only)", n);
      ok = 0;
      break;
    }
    for (int g = 0; g < f; g++) /* a neighbour across several faces is mapped once */
      if (h->nbr[g] == n) h->theirs[f] = h->theirs[g];
    if (h->theirs[f]) continue;
    err = cudaIpcOpenMemHandle((void**)&h->theirs[f], all[n], cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      h->theirs[f] = NULL;
      snprintf(why, whylen, "cudaIpcOpenMemHandle of rank %d's flags: %s", n, cudaGetErrorString(err));
      ok = 0;
    }
  }
  (void)cudaGetLastError();
  free(all);
  free(leaders);
  return ok;
}

static void unmap_neighbours(halo_flags_t* h) {
  for (int f = 0; f < HALO_FACES; f++) {
    int first = h->theirs[f] && h->theirs[f] != h->mine;
    for (int g = 0; first && g < f; g++) first = h->theirs[g] != h->theirs[f];
    if (first) (void)cudaIpcCloseMemHandle(h->theirs[f]);
    h->theirs[f] = NULL;
  }
}

halo_flags_t* halo_flags_open(MPI_Comm comm, const int nbr[HALO_FACES], char* why, size_t whylen) {
  int me, size;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  halo_flags_t* h = calloc(1, sizeof(*h));
  if (h == NULL) MPI_Abort(comm, 1);
  h->comm = comm;
  memcpy(h->nbr, nbr, sizeof(h->nbr));
  int ok = load_memops(h);
  if (!ok) snprintf(why, whylen, "the CUDA driver lacks cuStreamWriteValue64/cuStreamWaitValue64");
  cudaError_t err = cudaSuccess;
  if (ok && ((err = cudaMalloc((void**)&h->mine, REGION_BYTES)) != cudaSuccess ||
             (err = cudaMemset(h->mine, 0, REGION_BYTES)) != cudaSuccess ||
             (err = cudaDeviceSynchronize()) != cudaSuccess)) {
    snprintf(why, whylen, "flag region: %s", cudaGetErrorString(err));
    ok = 0;
  }
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  if (ok) {
    ok = map_neighbours(h, me, size, why, whylen);
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (!ok) {
      unmap_neighbours(h);
      MPI_Barrier(comm); /* no rank maps our region any more */
    }
  }
  if (ok) return h;
  if (why[0] == '\0') snprintf(why, whylen, "another rank failed to set up its flags");
  if (h->mine) (void)cudaFree(h->mine);
  free(h);
  return NULL;
}

cudaError_t halo_flags_sync(halo_flags_t* h, cudaStream_t stream) {
  CUstream s = (CUstream)stream;
  uint64_t c = ++h->count;
  for (int f = 0; f < HALO_FACES; f++) {
    if (!h->theirs[f]) continue;
    CUdeviceptr flag = (CUdeviceptr)(h->theirs[f] + FLAG_STRIDE * halo_opposite(f));
    if (h->write64(s, flag, c, 0) != CUDA_SUCCESS) return cudaErrorUnknown;
  }
  for (int f = 0; f < HALO_FACES; f++) {
    if (!h->theirs[f]) continue;
    CUdeviceptr flag = (CUdeviceptr)(h->mine + FLAG_STRIDE * f);
    if (h->wait64(s, flag, c, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) return cudaErrorUnknown;
  }
  return cudaSuccess;
}

void halo_flags_close(halo_flags_t* h) {
  if (h == NULL) return;
  MPI_Barrier(h->comm); /* every stream is done: no write of a neighbour still comes */
  unmap_neighbours(h);
  MPI_Barrier(h->comm);
  (void)cudaFree(h->mine);
  free(h);
}
