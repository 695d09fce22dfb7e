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

/* A region of every rank that its neighbours map. */
typedef struct {
  char* mine;                /* own */
  char* theirs[HALO_FACES];  /* nbr[f]'s, mapped (mine for itself), NULL without one */
} shared_t;

struct halo_flags {
  MPI_Comm comm;
  int nbr[HALO_FACES];
  shared_t flags;            /* one flag per face, FLAG_STRIDE apart */
  shared_t recv;             /* two receive buffers of recv_bytes, or none */
  size_t recv_bytes;
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

/* Rank in comm of the first rank of each rank's node, for every rank of comm. */
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

/* Maps the neighbours' regions of r; 1 on success, else why is set. */
static int map_neighbours(halo_flags_t* h, shared_t* r, int me, int size, char* why, size_t whylen) {
  int* leaders = node_leaders(h->comm, size);
  cudaIpcMemHandle_t mine;
  cudaIpcMemHandle_t* all = malloc((size_t)size * sizeof(mine));
  if (all == NULL) MPI_Abort(h->comm, 1);
  cudaError_t err = cudaIpcGetMemHandle(&mine, r->mine);
  if (err != cudaSuccess) memset(&mine, 0, sizeof(mine));
  MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, h->comm);
  int ok = err == cudaSuccess;
  if (!ok) snprintf(why, whylen, "cudaIpcGetMemHandle: %s", cudaGetErrorString(err));
  for (int f = 0; ok && f < HALO_FACES; f++) {
    int n = h->nbr[f];
    if (n < 0) continue;
    if (n == me) {
      r->theirs[f] = r->mine;
      continue;
    }
    if (leaders[n] != leaders[me]) {
      snprintf(why, whylen, "neighbour %d is on another node (CUDA IPC reaches this node only)", n);
      ok = 0;
      break;
    }
    for (int g = 0; g < f; g++) /* a neighbour across several faces is mapped once */
      if (h->nbr[g] == n) r->theirs[f] = r->theirs[g];
    if (r->theirs[f]) continue;
    err = cudaIpcOpenMemHandle((void**)&r->theirs[f], all[n], cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      r->theirs[f] = NULL;
      snprintf(why, whylen, "cudaIpcOpenMemHandle of rank %d's memory: %s", n, cudaGetErrorString(err));
      ok = 0;
    }
  }
  (void)cudaGetLastError();
  free(all);
  free(leaders);
  return ok;
}

static void unmap_neighbours(shared_t* r) {
  for (int f = 0; f < HALO_FACES; f++) {
    int first = r->theirs[f] && r->theirs[f] != r->mine;
    for (int g = 0; first && g < f; g++) first = r->theirs[g] != r->theirs[f];
    if (first) (void)cudaIpcCloseMemHandle(r->theirs[f]);
    r->theirs[f] = NULL;
  }
}

/* Allocates r's own region, zeroed; 1 on success, else why is set. */
static int shared_alloc(shared_t* r, size_t bytes, const char* what, char* why, size_t whylen) {
  cudaError_t err;
  if ((err = cudaMalloc((void**)&r->mine, bytes)) != cudaSuccess ||
      (err = cudaMemset(r->mine, 0, bytes)) != cudaSuccess || (err = cudaDeviceSynchronize()) != cudaSuccess) {
    snprintf(why, whylen, "%s: %s", what, cudaGetErrorString(err));
    return 0;
  }
  return 1;
}

static void shared_free(shared_t* r) {
  if (r->mine) (void)cudaFree(r->mine);
  r->mine = NULL;
}

halo_flags_t* halo_flags_open(MPI_Comm comm, const int nbr[HALO_FACES], size_t recv_bytes, char* why,
                              size_t whylen) {
  int me, size;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  halo_flags_t* h = calloc(1, sizeof(*h));
  if (h == NULL) MPI_Abort(comm, 1);
  if (whylen) why[0] = '\0';
  h->comm = comm;
  h->recv_bytes = recv_bytes;
  memcpy(h->nbr, nbr, sizeof(h->nbr));
  int ok = load_memops(h);
  if (!ok) snprintf(why, whylen, "the CUDA driver lacks cuStreamWriteValue64/cuStreamWaitValue64");
  ok = ok && shared_alloc(&h->flags, REGION_BYTES, "flag region", why, whylen);
  ok = ok && (recv_bytes == 0 || shared_alloc(&h->recv, 2 * recv_bytes, "receive buffers", why, whylen));
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  if (ok) {
    ok = map_neighbours(h, &h->flags, me, size, why, whylen) &&
         (recv_bytes == 0 || map_neighbours(h, &h->recv, me, size, why, whylen));
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (!ok) {
      unmap_neighbours(&h->flags);
      unmap_neighbours(&h->recv);
      MPI_Barrier(comm); /* no rank maps our regions any more */
    }
  }
  if (ok) return h;
  if (why[0] == '\0') snprintf(why, whylen, "another rank failed to set up its flags");
  shared_free(&h->flags);
  shared_free(&h->recv);
  free(h);
  return NULL;
}

cudaError_t halo_flags_sync(halo_flags_t* h, const halo_face_copy_t* copy, cudaStream_t stream) {
  CUstream s = (CUstream)stream;
  uint64_t c = ++h->count;
  size_t parity = (size_t)(c % 2) * h->recv_bytes;
  if (copy && h->recv_bytes == 0) return cudaErrorInvalidValue;
  for (int f = 0; copy && f < HALO_FACES; f++) {
    if (!h->recv.theirs[f]) continue;
    if (copy[f].dst_off + copy[f].bytes > h->recv_bytes) return cudaErrorInvalidValue;
    cudaError_t err = cudaMemcpyAsync(h->recv.theirs[f] + parity + copy[f].dst_off, copy[f].src, copy[f].bytes,
                                      cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return err;
  }
  for (int f = 0; f < HALO_FACES; f++) {
    if (!h->flags.theirs[f]) continue;
    CUdeviceptr flag = (CUdeviceptr)(h->flags.theirs[f] + FLAG_STRIDE * halo_opposite(f));
    if (h->write64(s, flag, c, 0) != CUDA_SUCCESS) return cudaErrorUnknown;
  }
  for (int f = 0; f < HALO_FACES; f++) {
    if (!h->flags.theirs[f]) continue;
    CUdeviceptr flag = (CUdeviceptr)(h->flags.mine + FLAG_STRIDE * f);
    if (h->wait64(s, flag, c, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) return cudaErrorUnknown;
  }
  return cudaSuccess;
}

void* halo_flags_received(const halo_flags_t* h) {
  return h->recv.mine + (size_t)(h->count % 2) * h->recv_bytes;
}

void halo_flags_close(halo_flags_t* h) {
  if (h == NULL) return;
  MPI_Barrier(h->comm); /* every stream is done: no write of a neighbour still comes */
  unmap_neighbours(&h->flags);
  unmap_neighbours(&h->recv);
  MPI_Barrier(h->comm);
  shared_free(&h->flags);
  shared_free(&h->recv);
  free(h);
}
