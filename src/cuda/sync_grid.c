/*
 * sync_grid.c - the counters of flag kernels of several blocks (sync.h,
 * mpn_sync_grid_take): a pool per device, made at communicator creation
 * (mpn_sync_grid_prepare) or on first use, of counter
 * slots in device memory (each on its own lines) and, for each, a word in
 * mapped host memory where a launch that used the slot leaves its epoch
 * once its counters are back at 0.  A slot is taken again only after its
 * last launch left its epoch (or never ran: mpn_sync_grid_release), or,
 * taken by a captured launch, once the graphs holding it are gone; when
 * none is free, a launch gets one block.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/service.h"
#include "cuda/sync.h"

/* Slots: enough for the captured launches of a few large graphs besides
 * the launches running. */
enum { POOL_SLOTS = 1024, POOL_STRIDE = 128, POOL_DEVICES = 64 };

typedef struct {
  CUdeviceptr counters;       /* POOL_SLOTS slots of MPN_SYNC_COUNTERS counters, POOL_STRIDE bytes apart */
  uint64_t* done;             /* host view of the words the launches set */
  CUdeviceptr done_dev;       /* their device address */
  uint64_t taken[POOL_SLOTS]; /* epoch of the last launch given each slot, 0: free */
  char graph[POOL_SLOTS];     /* ... a captured launch, which holds it until ... */
  int gone[POOL_SLOTS];       /* ... its graphs are gone (set on CUDA's thread: atomics) */
  uint64_t epoch;
  unsigned cursor;
  int sms;                    /* the device's multiprocessors */
} pool_t;

_Static_assert(MPN_SYNC_COUNTERS * sizeof(unsigned) <= POOL_STRIDE, "a slot's counters fit its stride");

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_t* pools[POOL_DEVICES];
static int pool_tried[POOL_DEVICES];

/* Makes the current device's pool, or NULL (said once).  Zeroes the
 * counters on the device's service stream, so that no stream of the
 * application is waited for; relaxed capture mode, so that a capture
 * another thread has open is not disturbed. */
static pool_t* pool_make(int dev) {
  pool_t* p = calloc(1, sizeof(*p));
  void* counters = NULL;
  size_t bytes = (size_t)POOL_SLOTS * POOL_STRIDE;
  cudaError_t err = p ? mpn_cuda_alloc_zeroed(bytes, bytes, &counters) : cudaErrorMemoryAllocation;
  cudaError_t own = cudaSuccess; /* a failure left recorded (mpn_cuda_alloc_zeroed forgets its own) */
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  if (err == cudaSuccess)
    err = own = mpn_cuda_host_mapped(POOL_SLOTS * sizeof(uint64_t), (void**)&p->done, &p->done_dev);
  if (err == cudaSuccess) err = own = cudaDeviceGetAttribute(&p->sms, cudaDevAttrMultiProcessorCount, dev);
  mpn_cuda_relaxed_leave(mode);
  if (err != cudaSuccess) {
    mpn_cuda_forget(own);
    MPN_INFO(MPN_SUBSYS_INIT, "device %d: no counters for flag kernels of several blocks (%s): one block each",
             dev, cudaGetErrorString(err));
    if (counters) mpn_cuda_forget(cudaFree(counters));
    if (p && p->done) mpn_cuda_forget(cudaFreeHost(p->done)); /* (the multiprocessors' query failed after it) */
    free(p);
    return NULL;
  }
  p->counters = (CUdeviceptr)counters;
  return p;
}

/* dev's pool, made on the first call (once: a failure leaves one block per
 * launch for the life of the process). */
static pool_t* pool_of(int dev) {
  pthread_mutex_lock(&pools_lock);
  int make = !pool_tried[dev];
  pool_tried[dev] = 1;
  pool_t* p = pools[dev];
  pthread_mutex_unlock(&pools_lock);
  if (!make) return p; /* NULL while another thread still makes it: one block meanwhile */
  p = pool_make(dev);
  pthread_mutex_lock(&pools_lock);
  pools[dev] = p;
  pthread_mutex_unlock(&pools_lock);
  return p;
}

void mpn_sync_grid_prepare(int dev) {
  if (dev < 0 || dev >= POOL_DEVICES) return;
  int saved = mpn_cuda_device_enter(dev);
  (void)pool_of(dev);
  mpn_cuda_device_leave(saved);
}

void mpn_sync_grid_forget(int dev) {
  if (dev < 0 || dev >= POOL_DEVICES) return;
  pthread_mutex_lock(&pools_lock);
  pools[dev] = NULL;
  pool_tried[dev] = 0;
  pthread_mutex_unlock(&pools_lock);
}

/* Whether slot i, taken, is free again: its last launch left its epoch, or
 * the graphs of the capture that took it are gone (pools_lock held). */
static int slot_free(pool_t* p, unsigned i) {
  if (p->graph[i]) return __atomic_load_n(&p->gone[i], __ATOMIC_ACQUIRE);
  return __atomic_load_n(&p->done[i], __ATOMIC_ACQUIRE) == p->taken[i];
}

void mpn_sync_grid_take(int dev, int sharers, mpn_sync_t* k) {
  int blocks = mpn_sync_blocks_wanted(k);
  k->grid.blocks = 1;
  if (blocks == 1 || dev < 0 || dev >= POOL_DEVICES) return;
  pool_t* p = pool_of(dev);
  if (!p) return;
  /* A block may fill a multiprocessor (sync.cu's bounds); the blocks that
   * poll, of all the GPU's ranks together, keep to half of them. */
  int most = p->sms / (2 * (sharers > 1 ? sharers : 1));
  if (blocks > most) blocks = most;
  if (blocks <= 1) return;
  pthread_mutex_lock(&pools_lock);
  for (int tries = 0; tries < POOL_SLOTS; tries++) {
    unsigned i = p->cursor++ % POOL_SLOTS;
    if (p->taken[i] && !slot_free(p, i)) continue;
    p->taken[i] = ++p->epoch;
    p->graph[i] = (char)(k->captured != 0);
    __atomic_store_n(&p->gone[i], 0, __ATOMIC_RELAXED);
    k->grid = (mpn_sync_grid_t){blocks, p->counters + (CUdeviceptr)i * POOL_STRIDE,
                                p->done_dev + i * sizeof(uint64_t), p->epoch, dev};
    break;
  }
  pthread_mutex_unlock(&pools_lock);
}

/* The slot of p whose counters k was given. */
static unsigned slot_of(const pool_t* p, const mpn_sync_t* k) {
  return (unsigned)((k->grid.counter - p->counters) / POOL_STRIDE);
}

void mpn_sync_grid_release(const mpn_sync_t* k) {
  if (k->grid.blocks <= 1) return;
  pthread_mutex_lock(&pools_lock);
  pool_t* p = pools[k->grid.dev]; /* (a slot was taken from it: it exists) */
  unsigned i = slot_of(p, k);
  if (p->taken[i] == k->grid.epoch) p->taken[i] = 0, p->graph[i] = 0;
  pthread_mutex_unlock(&pools_lock);
}

void mpn_sync_grid_slot(const mpn_sync_t* k, void** owner, uint32_t* slot) {
  pthread_mutex_lock(&pools_lock);
  pool_t* p = pools[k->grid.dev]; /* (a slot was taken from it: it exists) */
  pthread_mutex_unlock(&pools_lock);
  *owner = p;
  *slot = slot_of(p, k);
}

void mpn_sync_grid_gone(void* owner, uint32_t slot, uint64_t seq, int side) {
  (void)side;
  pool_t* p = owner;
  if (seq != 0 && slot < POOL_SLOTS) __atomic_store_n(&p->gone[slot], 1, __ATOMIC_RELEASE);
}
