/*
 * gslots.c - the slot words of one-sided signals over UCX captured in CUDA
 * graphs, on this side.  Within a host both sides' words are in the pair
 * file and a destroyed graph's news is filed for a launch to mark there
 * (p2p/pair.c); here they are this process's own, so the record's
 * destructor raises them itself, with atomics only (no lock, no CUDA call).
 * Each record entry holds a count on the words, which the communicator's
 * free therefore cannot take from under a late destructor.
 */
#include "ucx/gslots.h"

#include <stdlib.h>

typedef struct {
  uint64_t released[2]; /* per side: the last signal whose graphs are gone (only raised) */
  uint64_t capture[2];  /* per side: the capture that took the last signal */
} gslot_t;

struct mpn_ucx_gslots {
  int refs; /* the communicator's and one per record entry (atomic) */
  size_t n;
  gslot_t slot[];
};

mpn_ucx_gslots_t* mpn_ucx_gslots_create(size_t n) {
  mpn_ucx_gslots_t* g = calloc(1, sizeof(*g) + n * sizeof(gslot_t));
  if (g == NULL) return NULL;
  g->refs = 1;
  g->n = n;
  return g;
}

static void gslots_drop(mpn_ucx_gslots_t* g) {
  if (__atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL) == 0) free(g);
}

void mpn_ucx_gslots_destroy(mpn_ucx_gslots_t* g) {
  if (g) gslots_drop(g);
}

void mpn_ucx_gslots_take(mpn_ucx_gslots_t* g, mpn_graph_holds_t** h, cudaStream_t s, int dev, uint32_t i, uint64_t seq,
                         int side, unsigned long long capture) {
  __atomic_store_n(&g->slot[i].capture[side], (uint64_t)capture, __ATOMIC_RELEASE);
  __atomic_add_fetch(&g->refs, 1, __ATOMIC_ACQ_REL); /* the entry's, let go by its news */
  mpn_graph_holds_add_to(h, s, dev, mpn_ucx_gslots_released, g, i, seq, side);
}

void mpn_ucx_gslots_released(void* owner, uint32_t i, uint64_t seq, int side) {
  mpn_ucx_gslots_t* g = owner;
  /* Raised, never lowered: the news of an older signal may come late. */
  uint64_t* word = &g->slot[i].released[side];
  uint64_t cur = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  while (cur < seq && !__atomic_compare_exchange_n(word, &cur, seq, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
  gslots_drop(g);
}

int mpn_ucx_gslots_state(const mpn_ucx_gslots_t* g, uint32_t i, uint64_t prev, int side, unsigned long long capture) {
  if (__atomic_load_n(&g->slot[i].released[side], __ATOMIC_ACQUIRE) >= prev) return MPN_UCX_GSLOT_FREE;
  if (capture && __atomic_load_n(&g->slot[i].capture[side], __ATOMIC_ACQUIRE) == capture) return MPN_UCX_GSLOT_OWN;
  return MPN_UCX_GSLOT_HELD;
}

uint64_t mpn_ucx_gslots_released_up_to(const mpn_ucx_gslots_t* g, uint32_t i, int side) {
  return __atomic_load_n(&g->slot[i].released[side], __ATOMIC_ACQUIRE);
}
