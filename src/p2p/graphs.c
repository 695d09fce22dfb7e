/*
 * graphs.c - gives graph slots and the stages of memory-pool buffers back
 * once the graphs that captured them are destroyed: a launch notes, per
 * capturing stream, what its operations took, and hangs a record of it on
 * the graph being captured (a CUDA user object); CUDA releases the record
 * when the graph and every executable graph made from it are gone, and its
 * destructor files the news (pair.c, stage.c).
 */
#include "p2p/graphs.h"

#include <stdlib.h>

#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "cuda/device.h"
#include "p2p/plan.h"

typedef struct {
  cudaStream_t s;
  int dev;
  uint64_t gen; /* the pair's mapping */
  int kind;     /* MPN_GRAPH_P2P or MPN_GRAPH_RMA */
  uint32_t slot;
  uint64_t seq;
  int side;
  mpn_stage_t* stage;   /* or NULL */
  mpn_graph_news_fn fn; /* a slot that is not a pair's: where its news goes (or NULL) */
  void* owner;
} held_t;

struct mpn_graph_holds {
  int n, cap, lost; /* lost: entries that did not fit (out of memory) */
  held_t held[];
};

typedef struct {
  int n;
  held_t held[];
} record_t;

static uint64_t attached, not_attached, released; /* records, for tests and logs (atomics) */

/* On CUDA's thread: no lock, no CUDA call (pair.c and stage.c only file). */
static void record_release(void* arg) {
  record_t* r = arg;
  __atomic_add_fetch(&released, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < r->n; i++) {
    const held_t* e = &r->held[i];
    if (e->fn)
      e->fn(e->owner, e->slot, e->seq, e->side);
    else
      mpn_pair_graph_released(e->gen, e->kind, e->slot, e->seq, e->side);
    if (e->stage) mpn_stage_unpin(e->stage);
  }
  free(r);
}

/* Appends e to *h; 0 out of memory (then e's slot stays held for good). */
static int holds_push(mpn_graph_holds_t** h, held_t e) {
  mpn_graph_holds_t* g = *h;
  if (g == NULL || g->n == g->cap) {
    int cap = g ? 2 * g->cap : 8;
    mpn_graph_holds_t* bigger = realloc(g, sizeof(*g) + (size_t)cap * sizeof(held_t));
    if (bigger == NULL) {
      if (g)
        g->lost++; /* (logged by mpn_graph_holds_attach) */
      else
        MPN_WARN("out of memory: a graph slot will not be given back when its graph is destroyed");
      return 0;
    }
    if (g == NULL) bigger->n = bigger->lost = 0;
    bigger->cap = cap;
    *h = g = bigger;
  }
  g->held[g->n++] = e;
  return 1;
}

void mpn_graph_holds_add(mpn_graph_holds_t** h, cudaStream_t s, int dev, const mpn_pair_t* pair, int kind,
                         uint32_t slot, uint64_t seq, int side, mpn_stage_t* st) {
  holds_push(h, (held_t){s, dev, pair->gen, kind, slot, seq, side, st, NULL, NULL});
}

void mpn_graph_holds_add_to(mpn_graph_holds_t** h, cudaStream_t s, int dev, mpn_graph_news_fn fn, void* owner,
                            uint32_t slot, uint64_t seq, int side) {
  if (!holds_push(h, (held_t){s, dev, 0, 0, slot, seq, side, NULL, fn, owner})) fn(owner, slot, 0, side);
}

/* An entry whose record is not hung on its graph: its owner is let go
 * (news of signal 0: nothing released). */
static void held_drop(const held_t* e) {
  if (e->fn) e->fn(e->owner, e->slot, 0, e->side);
}

static int same_capture(const held_t* a, const held_t* b) { return a->s == b->s && a->dev == b->dev; }

/* One capture's entries, from held[first] on, as a record. */
static record_t* record_of(const mpn_graph_holds_t* g, int first, char* taken) {
  const held_t* a = &g->held[first];
  int k = 0;
  for (int j = first; j < g->n; j++) k += same_capture(&g->held[j], a);
  record_t* r = malloc(sizeof(*r) + (size_t)k * sizeof(held_t));
  if (r) r->n = 0;
  for (int j = first; j < g->n; j++) {
    if (!same_capture(&g->held[j], a)) continue;
    taken[j] = 1;
    if (r) r->held[r->n++] = g->held[j];
  }
  return r;
}

void mpn_graph_holds_attach(mpn_graph_holds_t* g, int rank, int* current_device) {
  if (g == NULL) return;
  char* taken = calloc((size_t)g->n + 1, 1);
  for (int i = 0; taken && i < g->n; i++) {
    if (taken[i]) continue;
    record_t* r = record_of(g, i, taken);
    mpn_cuda_switch_device(current_device, g->held[i].dev);
    if (r != NULL && mpn_cuda_capture_on_destroy(g->held[i].s, record_release, r) == ncclSuccess) {
      __atomic_add_fetch(&attached, 1, __ATOMIC_RELAXED);
      continue;
    }
    __atomic_add_fetch(&not_attached, 1, __ATOMIC_RELAXED);
    MPN_WARN("rank %d: the graph slots a capture took will not be given back when its graph is destroyed (%s)", rank,
             r ? mpn_error_last(NULL) : "out of memory");
    free(r);
    for (int j = i; j < g->n; j++)
      if (same_capture(&g->held[j], &g->held[i])) held_drop(&g->held[j]);
  }
  for (int j = 0; taken == NULL && j < g->n; j++) held_drop(&g->held[j]);
  if (taken == NULL || g->lost)
    MPN_WARN("rank %d: out of memory: some graph slots will not be given back when their graphs are destroyed", rank);
  free(taken);
  free(g);
}

void mpn_graph_holds_add_import(mpn_graph_holds_t** h, cudaStream_t s, int dev, const mpn_ipc_ref_t* ref) {
  mpn_ipc_pin_t* pin = mpn_ipc_mark_captured(ref);
  /* Signal number 1 is news of a graph gone; 0 would say that none was. */
  if (pin) mpn_graph_holds_add_to(h, s, dev, mpn_ipc_pin_gone, pin, 0, 1, 0);
}

void mpn_graph_holds_attach_here(mpn_graph_holds_t* h, int rank) {
  if (h == NULL) return;
  int saved = mpn_cuda_device_enter(-1), current = saved;
  mpn_graph_holds_attach(h, rank, &current);
  mpn_cuda_device_leave(saved);
}

void mpn_p2p_graphs_hold(plan_t* plans, int n, int* current_device) {
  mpn_graph_holds_t* h = NULL;
  int rank = -1;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->graph || !p->posted) continue;
    rank = p->op->comm->rank;
    mpn_graph_holds_add(&h, p->op->stream, p->op->comm->cuda_dev, p->pair, MPN_GRAPH_P2P, mpn_pair_graph_index(p->seq),
                        p->seq, plan_side(p), p->stage);
  }
  mpn_graph_holds_attach(h, rank, current_device);
}

void mpn_p2p_graph_stats(mpn_graph_stats_t* out) {
  mpn_pair_graph_counts(out);
  out->attached = __atomic_load_n(&attached, __ATOMIC_RELAXED);
  out->not_attached = __atomic_load_n(&not_attached, __ATOMIC_RELAXED);
  out->released = __atomic_load_n(&released, __ATOMIC_RELAXED);
}
