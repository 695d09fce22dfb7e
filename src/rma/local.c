/*
 * local.c - signals between ranks of one process under MPS.  A stream
 * memory wait holds one of the few hardware queues of an MPS client, and
 * the stream that would write the counter can sit behind it (docs/P2P.md,
 * the same hang of send/receive).  So, as send/receive does, ranks of one
 * process order their streams with events: the sender records an event
 * after the puts of each signal and publishes it with its count in a ring
 * of the pair (one per context, one producer and one consumer); the waiter,
 * on the host, takes the entry of the count it expects (dropping older
 * ones: the later event implies them, on one stream by its order, from
 * another by the wait for the earlier count before it, rma.c) and makes
 * its stream wait for that event, then gives it
 * back to the pool.  An event is never recorded again before its waiter
 * enqueued its wait.  The counter is still written, so a waiter that finds
 * no entry within MPINCCL_LOCAL_WAIT_US (a full ring, or a sender that
 * posts later) waits for the counter instead.
 */
#include "rma/local.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/param.h"
#include "cuda/device.h"
#include "cuda/event.h"
#include "p2p/pair.h"
#include "transport.h"

#define RING 1024

typedef struct {
  uint64_t count;
  cudaEvent_t ev;
  int dev;
} entry_t;

typedef struct {
  entry_t e[RING];
  uint64_t head; /* written by the sender */
  uint64_t tail; /* written by the waiter */
} ring_t;

static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;

/* The rings of a pair: one per context, each made on first use. */
typedef struct {
  ring_t* ctx[MPN_PAIR_RMA_CTX];
} rings_t;

static void rings_free(void* v) {
  rings_t* r = v;
  for (int c = 0; c < MPN_PAIR_RMA_CTX; c++) {
    if (r->ctx[c] == NULL) continue;
    for (uint64_t t = r->ctx[c]->tail; t < r->ctx[c]->head; t++)
      mpn_event_put(r->ctx[c]->e[t % RING].dev, r->ctx[c]->e[t % RING].ev);
    free(r->ctx[c]);
  }
  free(r);
}

int mpn_rma_local(const struct ncclComm* comm, int peer, int graph) {
  return !graph && mpn_transport_by_events(comm, peer);
}

/* The pair's ring of ctx (process memory: both ranks are in this process). */
static ring_t* ring_of(mpn_pair_t* pair, int ctx) {
  rings_t* rings = __atomic_load_n((rings_t**)&pair->rma_rings, __ATOMIC_ACQUIRE);
  ring_t* r = rings ? __atomic_load_n(&rings->ctx[ctx], __ATOMIC_ACQUIRE) : NULL;
  if (r != NULL) return r;
  pthread_mutex_lock(&rings_lock);
  rings = pair->rma_rings;
  if (rings == NULL && (rings = calloc(1, sizeof(*rings))) != NULL) {
    pair->rma_rings_free = rings_free;
    __atomic_store_n((rings_t**)&pair->rma_rings, rings, __ATOMIC_RELEASE);
  }
  if (rings && (r = rings->ctx[ctx]) == NULL && (r = calloc(1, sizeof(*r))) != NULL)
    __atomic_store_n(&rings->ctx[ctx], r, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&rings_lock);
  return r;
}

void mpn_rma_local_publish(mpn_pair_t* pair, int ctx, uint64_t count, cudaStream_t s, int dev) {
  ring_t* r = ring_of(pair, ctx);
  if (r == NULL) return;
  uint64_t h = r->head;
  if (h - __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) >= RING) return; /* full: the counter serves */
  cudaEvent_t ev = NULL;
  if (!mpn_event_mark(dev, s, &ev)) return;
  r->e[h % RING] = (entry_t){count, ev, dev};
  __atomic_store_n(&r->head, h + 1, __ATOMIC_RELEASE);
}

int mpn_rma_local_wait(mpn_pair_t* pair, int ctx, uint64_t expected, cudaStream_t s) {
  ring_t* r = ring_of(pair, ctx);
  if (r == NULL) return 0;
  uint64_t deadline = mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_LOCAL_WAIT) * 1000;
  for (;;) {
    uint64_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), t = r->tail;
    for (; t < h; t++) {
      entry_t* e = &r->e[t % RING];
      if (e->count > expected) break; /* a later point: no entry of ours */
      if (e->count == expected) {
        cudaError_t err = cudaStreamWaitEvent(s, e->ev, 0);
        mpn_cuda_forget(err);
        int ok = err == cudaSuccess;
        mpn_event_put(e->dev, e->ev);
        __atomic_store_n(&r->tail, t + 1, __ATOMIC_RELEASE);
        return ok;
      }
      mpn_event_put(e->dev, e->ev); /* older: implied by a later one */
    }
    __atomic_store_n(&r->tail, t, __ATOMIC_RELEASE);
    if ((t < h && r->e[t % RING].count > expected) || mpn_clock_now_ns() > deadline) {
      MPN_INFO(MPN_SUBSYS_RMA, "no event for signal count %llu; waiting for the counter",
               (unsigned long long)expected);
      return 0;
    }
  }
}

void mpn_rma_local_drop(mpn_pair_t* pair, int ctx, uint64_t expected) {
  ring_t* r = ring_of(pair, ctx);
  if (r == NULL) return;
  uint64_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), t = r->tail;
  for (; t < h && r->e[t % RING].count <= expected; t++) mpn_event_put(r->e[t % RING].dev, r->e[t % RING].ev);
  __atomic_store_n(&r->tail, t, __ATOMIC_RELEASE);
}
