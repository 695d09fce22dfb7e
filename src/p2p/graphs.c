/*
 * graphs.c - gives a pair's graph slots, and the stages of memory-pool
 * buffers, back once the graphs that captured their messages are destroyed:
 * each launch hangs, per capturing stream, a record of what its messages
 * took on the graph being captured (a CUDA user object); the record's
 * release files them (pair.c, stage.c).
 */
#include <stdlib.h>

#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "cuda/device.h"
#include "p2p/plan.h"

typedef struct {
  uint64_t gen; /* the pair's mapping */
  uint64_t seq; /* the message (its graph slot: pair.h) */
  int side;
  mpn_stage_t* stage; /* the stage the message took, or NULL */
} held_t;

typedef struct {
  int n;
  held_t held[];
} record_t;

static uint64_t attached, not_attached, released; /* records, for tests and logs (atomics) */

/* On CUDA's thread: no lock, no CUDA call (mpn_pair_graph_released). */
static void record_release(void* arg) {
  record_t* r = arg;
  __atomic_add_fetch(&released, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < r->n; i++) {
    mpn_pair_graph_released(r->held[i].gen, r->held[i].seq, r->held[i].side);
    if (r->held[i].stage) mpn_stage_unpin(r->held[i].stage);
  }
  free(r);
}

static int same_capture(const plan_t* a, const plan_t* b) {
  return b->graph && b->posted && b->op->stream == a->op->stream && b->op->comm->cuda_dev == a->op->comm->cuda_dev;
}

void mpn_p2p_graphs_hold(plan_t* plans, int n, int* current_device) {
  char* seen = calloc((size_t)(n ? n : 1), 1);
  if (seen == NULL) return; /* the slots stay held */
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (seen[i] || !p->graph || !p->posted) continue;
    int k = 0;
    for (int j = i; j < n; j++) k += same_capture(p, &plans[j]);
    record_t* r = malloc(sizeof(*r) + (size_t)k * sizeof(held_t));
    if (r) r->n = 0;
    for (int j = i; j < n; j++) {
      if (!same_capture(p, &plans[j])) continue;
      seen[j] = 1;
      if (r) r->held[r->n++] = (held_t){plans[j].pair->gen, plans[j].seq, plan_side(&plans[j]), plans[j].stage};
    }
    mpn_cuda_switch_device(current_device, p->op->comm->cuda_dev);
    if (r != NULL && mpn_cuda_capture_on_destroy(p->op->stream, record_release, r) == ncclSuccess) {
      __atomic_add_fetch(&attached, 1, __ATOMIC_RELAXED);
    } else {
      __atomic_add_fetch(&not_attached, 1, __ATOMIC_RELAXED);
      MPN_WARN(
          "rank %d: the graph slots of %d captured messages will not be given back when their graph is "
          "destroyed (%s)",
          p->op->comm->rank, k, r ? mpn_error_last(NULL) : "out of memory");
      free(r);
    }
  }
  free(seen);
}

void mpn_p2p_graph_stats(mpn_graph_stats_t* out) {
  mpn_pair_graph_counts(out);
  out->attached = __atomic_load_n(&attached, __ATOMIC_RELAXED);
  out->not_attached = __atomic_load_n(&not_attached, __ATOMIC_RELAXED);
  out->released = __atomic_load_n(&released, __ATOMIC_RELAXED);
}
