/*
 * drain.c - the streams a communicator's operations went to, each with an
 * event recorded after the communicator's last launch on it (drain.h).
 * Streams are told apart by their CUDA id, not their handle: a handle can
 * be reused by a new stream while the old one's work still runs.
 */
#include "core/drain.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/device.h"
#include "cuda/event.h"
#include "bootstrap/channel.h"

typedef struct {
  unsigned long long id; /* mpn_cuda_stream_id */
  cudaEvent_t ev;
} drain_stream_t;

struct mpn_drain {
  pthread_mutex_t lock;
  drain_stream_t* at;
  int n, cap;
  int warned; /* a failed record was logged */
};

/* Forgets the streams whose last mark has passed; returns how many have not. */
static int drain_prune(struct mpn_drain* d, int dev) {
  int k = 0;
  for (int i = 0; i < d->n; i++) {
    cudaError_t q = cudaEventQuery(d->at[i].ev);
    if (q == cudaErrorNotReady) {
      d->at[k++] = d->at[i];
      continue;
    }
    /* Done, or failed (a sticky error): nothing will run after it. */
    if (q != cudaSuccess) cudaGetLastError();
    mpn_event_put(dev, d->at[i].ev);
  }
  d->n = k;
  return k;
}

static struct mpn_drain* drain_of(struct ncclComm* comm) {
  struct mpn_drain* d = __atomic_load_n(&comm->drain, __ATOMIC_ACQUIRE);
  if (d) return d;
  d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  pthread_mutex_init(&d->lock, NULL);
  struct mpn_drain* none = NULL;
  if (__atomic_compare_exchange_n(&comm->drain, &none, d, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return d;
  pthread_mutex_destroy(&d->lock);
  free(d);
  return none;
}

/* The entry of stream id, added if new; NULL when out of memory or events. */
static drain_stream_t* drain_entry(struct mpn_drain* d, unsigned long long id, int dev) {
  for (int i = 0; i < d->n; i++)
    if (d->at[i].id == id) return &d->at[i];
  if (d->n == d->cap && drain_prune(d, dev) == d->cap) {
    int cap = d->cap ? 2 * d->cap : 8;
    drain_stream_t* grown = realloc(d->at, (size_t)cap * sizeof(*grown));
    if (grown == NULL) return NULL;
    d->at = grown;
    d->cap = cap;
  }
  cudaEvent_t ev = NULL;
  if (mpn_event_get(dev, &ev) != ncclSuccess) return NULL;
  d->at[d->n] = (drain_stream_t){id, ev};
  return &d->at[d->n++];
}

void mpn_drain_mark(struct ncclComm* comm, cudaStream_t s) {
  struct mpn_drain* d = drain_of(comm);
  if (d == NULL) return;
  unsigned long long id = mpn_cuda_stream_id(s);
  pthread_mutex_lock(&d->lock);
  drain_stream_t* e = drain_entry(d, id, comm->cuda_dev);
  cudaError_t err = e ? cudaEventRecord(e->ev, s) : cudaErrorMemoryAllocation;
  int warn = err != cudaSuccess && !d->warned;
  if (err != cudaSuccess) {
    cudaGetLastError();
    d->warned = 1;
    if (e) e->id = 0; /* an event that marks nothing of s: the next prune drops it */
  }
  pthread_mutex_unlock(&d->lock);
  if (warn)
    MPN_WARN(
        "rank %d: cannot mark its work on stream %p (%s): ncclCommFinalize and ncclCommDestroy will not "
        "wait for it",
        comm->rank, (void*)s, cudaGetErrorString(err));
}

int mpn_drain_done(struct ncclComm* comm) {
  struct mpn_drain* d = __atomic_load_n(&comm->drain, __ATOMIC_ACQUIRE);
  if (d == NULL) return 1;
  pthread_mutex_lock(&d->lock);
  int pending = drain_prune(d, comm->cuda_dev);
  pthread_mutex_unlock(&d->lock);
  return pending == 0;
}

ncclResult_t mpn_drain_wait(struct ncclComm* comm, const char* caller) {
  long long limit = mpn_param_int(MPN_PARAM_FINALIZE_TIMEOUT);
  uint64_t start = mpn_chan_now_ns(), next_warn = start + 10000000000ull;
  useconds_t nap = 20;
  while (!mpn_drain_done(comm)) {
    uint64_t now = mpn_chan_now_ns();
    if (limit > 0 && now - start > (uint64_t)limit * 1000000000ull)
      return MPN_REFUSE(comm, ncclTimeout,
                        "%s: rank %d's operations were not done after MPINCCL_FINALIZE_TIMEOUT=%lld s (a "
                        "peer that never posts the matching call?)",
                        caller, comm->rank, limit);
    if (now > next_warn) {
      MPN_WARN("%s: rank %d still waits for its operations after %.0f s", caller, comm->rank,
               (double)(now - start) * 1e-9);
      next_warn = now + 10000000000ull;
    }
    usleep(nap);
    if (nap < 1000) nap *= 2;
  }
  return ncclSuccess;
}

void mpn_drain_free(struct ncclComm* comm) {
  struct mpn_drain* d = comm->drain;
  if (d == NULL) return;
  for (int i = 0; i < d->n; i++) mpn_event_put(comm->cuda_dev, d->at[i].ev);
  free(d->at);
  pthread_mutex_destroy(&d->lock);
  free(d);
  comm->drain = NULL;
}
