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
 *
 * An ncclMemFree of memory that backs a live window is deferred to the
 * deregistration of the last such window (memory.h): freed at once, CUDA
 * may hand the address to the next allocation, and the peers' puts into
 * the still registered window would land in it.
 */
#include "cuda/memory.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/api.h"
#include "core/error.h"
#include "cuda/device.h"
#include "cuda/driver.h"
#include "cuda/ipc.h"

typedef struct mpn_mem_alloc {
  struct mpn_mem_alloc* next;
  void *user, *base;
  size_t size;  /* as asked */
  size_t bytes; /* as allocated at base */
  int windows;  /* live windows over it (mpn_mem_pin) */
  int freed;    /* ncclMemFree came while windows held it */
  int dev;      /* the device it is on ... */
  unsigned long long ctx; /* ... and that device's context then (mpn_cuda_context_id) */
  int gone;               /* the device was reset since: the memory went with the context */
} alloc_t;

/* Guards allocs and every record's windows, freed and gone. */
static alloc_t* allocs;
static pthread_mutex_t alloc_lock = PTHREAD_MUTEX_INITIALIZER;

/* Under alloc_lock: the records of dev made in another context than ctx
 * (the program reset the device since) are marked gone: their memory went
 * with the old context, and an ncclMemFree of them frees nothing through
 * CUDA (which could free a new allocation at the same address). */
static void forget_locked(int dev, unsigned long long ctx) {
  for (alloc_t* a = allocs; a; a = a->next)
    if (a->dev == dev && a->ctx != ctx && a->ctx != 0 && ctx != 0) a->gone = 1;
}

void mpn_mem_forget(int dev, unsigned long long ctx) {
  pthread_mutex_lock(&alloc_lock);
  forget_locked(dev, ctx);
  pthread_mutex_unlock(&alloc_lock);
}

/* The records of the current device from before a reset are marked gone. */
static void forget_stale(void) {
  int dev = mpn_cuda_current_device();
  if (dev >= 0) mpn_mem_forget(dev, mpn_cuda_context_id());
}

MPN_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  if (size == 0) return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemAlloc: size is 0");
  if (size > SIZE_MAX - MPN_IPC_BLOCK_BYTES - NCCL_WIN_REQUIRED_ALIGNMENT)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemAlloc: size %zu is too large", size);
  size_t rounded = (size + MPN_IPC_BLOCK_BYTES - 1) / MPN_IPC_BLOCK_BYTES * MPN_IPC_BLOCK_BYTES;
  alloc_t* a = calloc(1, sizeof(*a));
  if (a == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  /* cudaMalloc aligns to at least 256 bytes; over-allocate only if needed. */
  a->bytes = rounded;
  cudaError_t err = cudaMalloc(&a->base, rounded);
  if (err == cudaSuccess && (uintptr_t)a->base % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
    mpn_cuda_forget(cudaFree(a->base));
    a->bytes = rounded + NCCL_WIN_REQUIRED_ALIGNMENT;
    err = cudaMalloc(&a->base, a->bytes);
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
  a->dev = mpn_cuda_current_device();
  a->ctx = mpn_cuda_context_id();
  pthread_mutex_lock(&alloc_lock);
  forget_locked(a->dev, a->ctx);
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&alloc_lock);
  *ptr = a->user;
  return ncclSuccess;
}

/* The link to a's record in allocs (under alloc_lock). */
static alloc_t** alloc_link(const alloc_t* a) {
  alloc_t** pa = &allocs;
  while (*pa != a) pa = &(*pa)->next;
  return pa;
}

/* Whether a's memory went with a reset that forget_stale could not see
 * (of a device other than the current one): the driver finds an allocation
 * of another context at its base, which the program made there since, and
 * which cudaFree would free.  (Where it finds none, cudaFree only fails.) */
static int alloc_moved(const alloc_t* a) {
  const mpn_driver_t* drv;
  CUcontext ctx = NULL;
  unsigned long long id = 0;
  return a->ctx != 0 && mpn_driver_get(&drv) == ncclSuccess &&
         drv->pointer_get_attribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)a->base) == CUDA_SUCCESS &&
         ctx != NULL && drv->ctx_get_id(ctx, &id) == CUDA_SUCCESS && id != 0 && id != a->ctx;
}

/* Whether a's memory is still there (under alloc_lock, or with a out of
 * allocs): one that went with a reset of any device is marked gone. */
static int alloc_live(alloc_t* a) {
  if (!a->gone && alloc_moved(a)) a->gone = 1;
  return !a->gone;
}

/* Frees a's memory and record (out of allocs already); CUDA's verdict.
 * Memory that went with a reset is not freed through CUDA (a deferred free
 * may come after a reset of another device than the current one). */
static cudaError_t alloc_release(alloc_t* a) {
  cudaError_t err = alloc_live(a) ? cudaFree(a->base) : cudaSuccess;
  free(a);
  if (err != cudaSuccess) cudaGetLastError();
  return err;
}

/* The record whose user pointer is ptr (under alloc_lock): one of this
 * context first, since a gone record may have its address. */
static alloc_t* alloc_find(const void* ptr) {
  alloc_t* gone = NULL;
  for (alloc_t* a = allocs; a; a = a->next) {
    if (a->user != ptr) continue;
    if (!a->gone) return a;
    if (gone == NULL) gone = a;
  }
  return gone;
}

MPN_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (ptr == NULL) return ncclSuccess; /* as NCCL's, which passes it to cudaFree */
  forget_stale();
  pthread_mutex_lock(&alloc_lock);
  alloc_t* a = alloc_find(ptr);
  int again = a && a->freed, windows = a ? a->windows : 0;
  if (a && !again) {
    if (windows > 0)
      a->freed = 1; /* the last mpn_mem_unpin frees it */
    else
      *alloc_link(a) = a->next;
  }
  pthread_mutex_unlock(&alloc_lock);
  if (a == NULL)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclMemFree: %p was not allocated by ncclMemAlloc",
                      ptr);
  if (again)
    return MPN_REFUSE(NULL, ncclInvalidArgument,
                      "ncclMemFree: %p was freed already (its memory is released when the last window "
                      "over it is deregistered)",
                      ptr);
  if (windows > 0) {
    MPN_INFO(MPN_SUBSYS_RMA, "ncclMemFree: %p backs %d live window(s): released when the last is deregistered", ptr,
             windows);
    return ncclSuccess;
  }
  cudaError_t err = alloc_release(a);
  if (err != cudaSuccess)
    return mpn_error_set(NULL, ncclUnhandledCudaError, "ncclMemFree: cudaFree failed: %s", cudaGetErrorString(err));
  return ncclSuccess;
}

ncclResult_t mpn_mem_pin(struct ncclComm* comm, const char* caller, const void* buff, mpn_mem_alloc_t** out) {
  uintptr_t p = (uintptr_t)buff;
  forget_stale();
  pthread_mutex_lock(&alloc_lock);
  alloc_t* a = allocs;
  /* (forget_stale saw the current device only: a record of another device
   * that was reset holds no memory, whatever the program made there since) */
  while (a && !(p >= (uintptr_t)a->base && p - (uintptr_t)a->base < a->bytes && alloc_live(a))) a = a->next;
  int freed = a && a->freed;
  void* user = a ? a->user : NULL; /* read here: a freed record goes with its last window */
  if (a && !freed) a->windows++;
  pthread_mutex_unlock(&alloc_lock);
  if (freed)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: buff %p is in memory that ncclMemFree(%p) freed, kept only until the windows "
                      "over it are deregistered",
                      caller, buff, user);
  *out = a;
  return ncclSuccess;
}

void mpn_mem_unpin(mpn_mem_alloc_t* a) {
  if (a == NULL) return;
  pthread_mutex_lock(&alloc_lock);
  int release = --a->windows == 0 && a->freed;
  if (release) *alloc_link(a) = a->next;
  pthread_mutex_unlock(&alloc_lock);
  if (!release) return;
  void* user = a->user;
  cudaError_t err = alloc_release(a);
  if (err != cudaSuccess)
    MPN_WARN("ncclMemFree of %p, deferred until its last window went: cudaFree failed: %s", user,
             cudaGetErrorString(err));
  else
    MPN_INFO(MPN_SUBSYS_RMA,
             "ncclMemFree of %p done now: its last window went (deregistered, or its "
             "communicator destroyed)",
             user);
}
