/*
 * orphans.h - captured state over UCX whose graphs outlived its
 * communicator (graph.c, gnodes.c): kept whole, since a replay queued
 * before the destroy may still copy through it, until the graphs are gone;
 * then freed by the next reap (each captured launch over UCX and each
 * communicator's end reaps).
 */
#ifndef MPN_UCX_ORPHANS_H_
#define MPN_UCX_ORPHANS_H_

#include "ucx/gone.h"

/** Frees one kept object (on an API thread, in relaxed capture mode where
 *  it frees CUDA memory). */
typedef void (*mpn_ucx_orphan_free_fn)(void* obj);

/**
 * Keeps obj until mark, which the graphs' news sets, is set; a reap then
 * frees it with fn.  The caller hands over its hold of the mark with obj
 * (fn lets go of it).  0, keeping nothing, when out of memory.
 */
int mpn_ucx_orphan_keep(mpn_ucx_gone_t* mark, mpn_ucx_orphan_free_fn fn, void* obj);

/** Frees the kept objects whose graphs are gone; the others stay. */
void mpn_ucx_orphans_reap(void);

/** Reaps, then tells how many objects are still kept (tests). */
int mpn_ucx_orphans_count(void);

#endif /* MPN_UCX_ORPHANS_H_ */
