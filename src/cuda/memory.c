/*
 * memory.c - ncclMemAlloc/ncclMemFree: device memory that other processes
 * can map through CUDA IPC (plain cudaMalloc allocations are exportable;
 * memory-pool allocations are not), aligned to NCCL_WIN_REQUIRED_ALIGNMENT
 * so that it can always back a window.  Allocations are recorded so that
 * freeing a foreign pointer is refused instead of corrupting the allocator.
 *
 * Sizes are rounded up to MPN_IPC_BLOCK_BYTES, as NCCL rounds to the
 * allocation granularity: every buffer is then a block of its own, which a
 * peer maps once, instead of a slice of a block shared with allocations made
 * later (see cuda/ipc.h and docs/P2P.md).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/api.h"
#include "core/error.h"
#include "cuda/ipc.h"

typedef struct alloc {
  struct alloc* next;
  void *user, *base;
  size_t size;
} alloc_t;

static alloc_t* allocs;
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;

MPN_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  if (size == 0) return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemAlloc: size is 0");
  if (size > SIZE_MAX - MPN_IPC_BLOCK_BYTES - NCCL_WIN_REQUIRED_ALIGNMENT)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemAlloc: size %zu is too large", size);
  size_t rounded = (size + MPN_IPC_BLOCK_BYTES - 1) / MPN_IPC_BLOCK_BYTES * MPN_IPC_BLOCK_BYTES;
  alloc_t* a = calloc(1, sizeof(*a));
  if (a == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  /* cudaMalloc aligns to at least 256 bytes; over-allocate only if needed. */
  cudaError_t err = cudaMalloc(&a->base, rounded);
  if (err == cudaSuccess && (uintptr_t)a->base % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
    cudaFree(a->base);
    err = cudaMalloc(&a->base, rounded + NCCL_WIN_REQUIRED_ALIGNMENT);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    free(a);
    return mpn_error_set(NULL, ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc of %zu bytes failed: %s",
                         size, cudaGetErrorString(err));
  }
  uintptr_t align = NCCL_WIN_REQUIRED_ALIGNMENT;
  a->user = (void*)(((uintptr_t)a->base + align - 1) & ~(align - 1));
  a->size = size;
  pthread_mutex_lock(&alloc_lock);
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&alloc_lock);
  *ptr = a->user;
  return ncclSuccess;
}

MPN_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (ptr == NULL) return ncclSuccess; /* as NCCL's, which passes it to cudaFree */
  pthread_mutex_lock(&alloc_lock);
  alloc_t** pa = &allocs;
  while (*pa && (*pa)->user != ptr) pa = &(*pa)->next;
  alloc_t* a = *pa;
  if (a) *pa = a->next;
  pthread_mutex_unlock(&alloc_lock);
  if (a == NULL)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemFree: %p was not allocated by ncclMemAlloc",
                      ptr);
  cudaError_t err = cudaFree(a->base);
  free(a);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return mpn_error_set(NULL, ncclUnhandledCudaError, "ncclMemFree: cudaFree failed: %s",
                         cudaGetErrorString(err));
  }
  return ncclSuccess;
}
