/*
 * sync_grid.c - the counters of flag kernels of several blocks (sync.h,
 * mpn_sync_grid_take): a pool per device, made on first use, of counters
 * in device memory (each on its own line) and, for each, a word in mapped
 * host memory where a launch that used the counter leaves its epoch once
 * the counter is back at 0.  A counter is taken again only after its last
 * launch left its epoch; a launch that never runs keeps its counter, and
 * when none is free, launches get one block.
 */
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/sync.h"

enum { POOL_SLOTS = 256, POOL_STRIDE = 128, POOL_DEVICES = 64 };

typedef struct {
  CUdeviceptr counters;      /* POOL_SLOTS counters, POOL_STRIDE bytes apart */
  uint64_t* done;            /* host view of the words the launches set */
  CUdeviceptr done_dev;      /* their device address */
  uint64_t taken[POOL_SLOTS]; /* epoch of the last launch given each slot, 0: never */
  uint64_t epoch;
  unsigned cursor;
} pool_t;

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_t* pools[POOL_DEVICES];
static int pool_failed[POOL_DEVICES];

/* Makes dev's pool (dev current); NULL on failure, said once.  Relaxed
 * capture mode: a graph captured by another thread is not disturbed. */
static pool_t* pool_make(int dev) {
  pool_t* p = calloc(1, sizeof(*p));
  void* counters = NULL;
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t err = p ? cudaMalloc(&counters, (size_t)POOL_SLOTS * POOL_STRIDE) : cudaErrorMemoryAllocation;
  if (err == cudaSuccess) err = cudaMemset(counters, 0, (size_t)POOL_SLOTS * POOL_STRIDE);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = mpn_cuda_host_mapped(POOL_SLOTS * sizeof(uint64_t), (void**)&p->done, &p->done_dev);
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (err != cudaSuccess) {
    cudaGetLastError();
    MPN_INFO(MPN_SUBSYS_INIT, "device %d: no counters for flag kernels of several blocks (%s): one block each",
             dev, cudaGetErrorString(err));
    if (counters) cudaFree(counters);
    free(p);
    return NULL;
  }
  p->counters = (CUdeviceptr)counters;
  return p;
}

void mpn_sync_grid_take(int dev, mpn_sync_t* k) {
  int blocks = mpn_sync_blocks_wanted(k), counted = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) counted += k->nlast[r] > 0;
  k->grid.blocks = 1;
  if (blocks == 1 || dev < 0 || dev >= POOL_DEVICES) return;
  if (!counted) { /* no flag after the copies: the blocks need not count */
    k->grid.blocks = blocks;
    return;
  }
  pthread_mutex_lock(&pools_lock);
  pool_t* p = pools[dev];
  if (!p && !pool_failed[dev] && !(p = pools[dev] = pool_make(dev))) pool_failed[dev] = 1;
  for (int tries = 0; p && tries < POOL_SLOTS; tries++) {
    unsigned i = p->cursor++ % POOL_SLOTS;
    if (p->taken[i] && __atomic_load_n(&p->done[i], __ATOMIC_ACQUIRE) != p->taken[i]) continue;
    p->taken[i] = ++p->epoch;
    k->grid = (mpn_sync_grid_t){blocks, p->counters + (CUdeviceptr)i * POOL_STRIDE,
                                p->done_dev + i * sizeof(uint64_t), p->epoch};
    break;
  }
  pthread_mutex_unlock(&pools_lock);
}
