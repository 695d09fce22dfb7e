/*
 * stage.c - the process's bounce buffers: a list scanned under one lock.
 * A message needs a stage only when its own buffer came from a memory pool
 * and it arrives first in its pair, so the list stays short.
 */
#include "p2p/stage.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/debug.h"
#include "core/error.h"
#include "cuda/device.h"
#include "cuda/ipc.h"

struct mpn_stage {
  struct mpn_stage* next;
  void* ptr;
  size_t bytes;
  int dev;
  int busy;          /* handed out and not yet put back */
  int pinned;        /* in a CUDA graph (or its event failed): not reused */
  cudaEvent_t freed; /* recorded where the last user's stream put it back */
  struct mpn_stage* unpin_next; /* on unpinned, once its graph is gone */
};

static struct mpn_stage* stages;
static pthread_mutex_t stage_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mpn_stage* unpinned; /* news from graphs' destructors (lock-free stack) */

void mpn_stage_unpin(mpn_stage_t* st) {
  st->unpin_next = __atomic_load_n(&unpinned, __ATOMIC_ACQUIRE);
  while (!__atomic_compare_exchange_n(&unpinned, &st->unpin_next, st, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
}

/* Under stage_lock: the stages whose graphs are gone serve again (their
 * last stream use, if any, was before the capture: freed still says when). */
static void unpin_reap(void) {
  struct mpn_stage* st = __atomic_exchange_n(&unpinned, NULL, __ATOMIC_ACQ_REL);
  for (; st; st = st->unpin_next) st->pinned = 0;
}

int mpn_stage_pinned(void) {
  pthread_mutex_lock(&stage_lock);
  unpin_reap();
  int n = 0;
  for (struct mpn_stage* st = stages; st; st = st->next) n += st->pinned;
  pthread_mutex_unlock(&stage_lock);
  return n;
}

static int stage_idle(struct mpn_stage* st) {
  if (st->busy || st->pinned) return 0;
  if (st->freed == NULL) return 1;
  cudaError_t err = cudaEventQuery(st->freed);
  mpn_cuda_forget(err); /* (not for cudaErrorNotReady, which the query did not record) */
  return err == cudaSuccess;
}

static ncclResult_t stage_get(struct ncclComm* comm, const char* fn, const char* name, size_t bytes, mpn_stage_t** out);

/* The caller's stream may be capturing a graph: event queries and
 * allocations here are not part of it (relaxed capture mode). */
ncclResult_t mpn_stage_get(struct ncclComm* comm, const char* fn, const char* name, size_t bytes, mpn_stage_t** out) {
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  ncclResult_t res = stage_get(comm, fn, name, bytes, out);
  mpn_cuda_relaxed_leave(mode);
  return res;
}

/* comm, fn and name are the caller's, for the text of a refusal. */
static ncclResult_t stage_get(struct ncclComm* comm, const char* fn, const char* name, size_t bytes,
                              mpn_stage_t** out) {
  /* Rounded up to whole blocks below: a size within a block of SIZE_MAX
   * would wrap to 0, and cudaMalloc of 0 bytes "succeeds" with NULL. */
  if (bytes > SIZE_MAX - (MPN_IPC_BLOCK_BYTES - 1))
    return mpn_error_set(comm, ncclInvalidArgument,
                         "%s: %s of %zu bytes is too large to stage (a staging buffer is at most %zu bytes)", fn, name,
                         bytes, SIZE_MAX - (MPN_IPC_BLOCK_BYTES - 1));
  int dev = -1;
  MPN_CUDA_CHECK(cudaGetDevice(&dev));
  pthread_mutex_lock(&stage_lock);
  unpin_reap();
  struct mpn_stage* best = NULL;
  for (struct mpn_stage* st = stages; st; st = st->next)
    if (st->dev == dev && st->bytes >= bytes && (best == NULL || st->bytes < best->bytes) &&
        stage_idle(st))
      best = st;
  if (best) best->busy = 1;
  pthread_mutex_unlock(&stage_lock);
  if (best) {
    *out = best;
    return ncclSuccess;
  }
  /* A new one, whole blocks (see MPN_IPC_BLOCK_BYTES). */
  struct mpn_stage* st = calloc(1, sizeof(*st));
  if (st == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  st->bytes = (bytes + MPN_IPC_BLOCK_BYTES - 1) / MPN_IPC_BLOCK_BYTES * MPN_IPC_BLOCK_BYTES;
  st->dev = dev;
  st->busy = 1;
  cudaError_t err = cudaMalloc(&st->ptr, st->bytes);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&st->freed, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (st->ptr) mpn_cuda_forget(cudaFree(st->ptr));
    free(st);
    return mpn_error_set(comm, ncclUnhandledCudaError, "%s: a staging buffer of %zu bytes for %s: %s", fn, bytes, name,
                         cudaGetErrorString(err));
  }
  MPN_TRACE(MPN_SUBSYS_P2P, "new staging buffer of %zu bytes on device %d", st->bytes, dev);
  pthread_mutex_lock(&stage_lock);
  st->next = stages;
  stages = st;
  pthread_mutex_unlock(&stage_lock);
  *out = st;
  return ncclSuccess;
}

void* mpn_stage_ptr(const mpn_stage_t* st) { return st->ptr; }

void mpn_stage_put(mpn_stage_t* st, cudaStream_t stream, mpn_stage_use_t use) {
  pthread_mutex_lock(&stage_lock);
  if (use == MPN_STAGE_PINNED) {
    st->pinned = 1;
  } else if (use == MPN_STAGE_STREAM && cudaEventRecord(st->freed, stream) != cudaSuccess) {
    cudaGetLastError();
    st->pinned = 1; /* never known idle */
  }                 /* unused: its event is still the completed one it had */
  st->busy = 0;
  pthread_mutex_unlock(&stage_lock);
}

void mpn_stage_forget(int dev) {
  pthread_mutex_lock(&stage_lock);
  for (struct mpn_stage** at = &stages; *at;)
    if ((*at)->dev == dev)
      *at = (*at)->next;
    else
      at = &(*at)->next;
  pthread_mutex_unlock(&stage_lock);
}
