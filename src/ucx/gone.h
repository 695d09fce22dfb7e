/*
 * gone.h - a mark that the graphs holding some captured state are gone,
 * shared by that state and the graphs' CUDA user object or record: the
 * destructor may run after the state was freed with its communicator, so
 * whichever lets go last frees the mark (graph.c, gnodes.c).
 */
#ifndef MPN_UCX_GONE_H_
#define MPN_UCX_GONE_H_

#include <stdlib.h>

typedef struct {
  int gone; /**< the graph and every executable graph made from it are destroyed */
  int refs; /**< the state's and the graph's */
} mpn_ucx_gone_t;

/** A mark not yet set, held twice (the state's and the graph's); NULL out of memory. */
static inline mpn_ucx_gone_t* mpn_ucx_gone_create(void) {
  mpn_ucx_gone_t* t = malloc(sizeof(*t));
  if (t) *t = (mpn_ucx_gone_t){.gone = 0, .refs = 2};
  return t;
}

/** Lets go of one hold (t may be NULL). */
static inline void mpn_ucx_gone_drop(mpn_ucx_gone_t* t) {
  if (t && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0) free(t);
}

/** The graph's side, on CUDA's thread (no lock, no CUDA call): sets the
 *  mark, then lets go of the graph's hold. */
static inline void mpn_ucx_gone_set(mpn_ucx_gone_t* t) {
  __atomic_store_n(&t->gone, 1, __ATOMIC_RELEASE);
  mpn_ucx_gone_drop(t);
}

/** Whether the graph's side still holds the mark, so that its news may
 *  still come (0 for NULL).  Read it before mpn_ucx_gone_is: the news sets
 *  the mark before it lets go. */
static inline int mpn_ucx_gone_awaited(const mpn_ucx_gone_t* t) {
  return t && __atomic_load_n(&t->refs, __ATOMIC_ACQUIRE) > 1;
}

/** Whether the mark is set (0 for NULL: the graph was never watched). */
static inline int mpn_ucx_gone_is(const mpn_ucx_gone_t* t) { return t && __atomic_load_n(&t->gone, __ATOMIC_ACQUIRE); }

#endif /* MPN_UCX_GONE_H_ */
