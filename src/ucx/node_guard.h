/*
 * node_guard.h - a captured graph's host node against its communicator's
 * free: a replay may run the node after the communicator is gone, so the
 * node runs only while its state is not marked dead, and the free waits for
 * the node running now (graph.c, winstage.c).  The state itself is then
 * leaked, for late nodes to read the mark.
 */
#ifndef MPN_UCX_NODE_GUARD_H_
#define MPN_UCX_NODE_GUARD_H_

#include <unistd.h>

typedef struct {
  int dead; /**< freed with its communicator */
  int busy; /**< host nodes running now */
} mpn_ucx_node_guard_t;

/** A host node begins: 1 if it may go on (then mpn_ucx_node_leave), 0 if
 *  its communicator is gone. */
static inline int mpn_ucx_node_enter(mpn_ucx_node_guard_t* g) {
  __atomic_add_fetch(&g->busy, 1, __ATOMIC_SEQ_CST);
  if (!__atomic_load_n(&g->dead, __ATOMIC_SEQ_CST)) return 1;
  __atomic_sub_fetch(&g->busy, 1, __ATOMIC_SEQ_CST);
  return 0;
}

/** A host node that entered ends. */
static inline void mpn_ucx_node_leave(mpn_ucx_node_guard_t* g) { __atomic_sub_fetch(&g->busy, 1, __ATOMIC_SEQ_CST); }

/** Marks the state dead and waits for the host node running now, if any. */
static inline void mpn_ucx_node_kill(mpn_ucx_node_guard_t* g) {
  __atomic_store_n(&g->dead, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&g->busy, __ATOMIC_SEQ_CST)) usleep(20);
}

#endif /* MPN_UCX_NODE_GUARD_H_ */
