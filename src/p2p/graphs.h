/*
 * graphs.h - gives graph slots (send/receive messages and one-sided
 * signals) and the stages of memory-pool buffers back once the graphs that
 * captured them are destroyed, on both sides (graphs.c, pair.c).
 */
#ifndef MPN_P2P_GRAPHS_H_
#define MPN_P2P_GRAPHS_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "p2p/pair.h"
#include "p2p/stage.h"

/** What one launch's captured operations took, to be hung on their graphs. */
typedef struct mpn_graph_holds mpn_graph_holds_t;

/**
 * Notes that the capture on stream s (of device dev) holds slot `slot` of
 * pair's graph slots of kind (MPN_GRAPH_P2P or MPN_GRAPH_RMA) for message
 * or signal seq on side (MPN_SIDE_*), and stage st (or NULL).  *h grows
 * (NULL to start); out of memory, the slot stays held for good (logged by
 * mpn_graph_holds_attach).
 */
void mpn_graph_holds_add(mpn_graph_holds_t** h, cudaStream_t s, int dev, const mpn_pair_t* pair, int kind,
                         uint32_t slot, uint64_t seq, int side, mpn_stage_t* st);

/**
 * Where the news of a slot that is not a pair's goes: fn(owner, slot, seq,
 * side), called once per mpn_graph_holds_add_to, on CUDA's thread once the
 * graphs holding it are gone (it may neither lock nor call CUDA), or with
 * seq 0 where no record could be hung (nothing was released: it only lets
 * go of owner).
 */
typedef void (*mpn_graph_news_fn)(void* owner, uint32_t slot, uint64_t seq, int side);

/**
 * mpn_graph_holds_add for a slot kept by owner (one-sided signals over
 * UCX: ucx/gslots.h): its news goes to fn, at once with seq 0 out of memory.
 */
void mpn_graph_holds_add_to(mpn_graph_holds_t** h, cudaStream_t s, int dev, mpn_graph_news_fn fn, void* owner,
                            uint32_t slot, uint64_t seq, int side);

/**
 * Hangs, on the graph each noted stream is capturing, a record of what it
 * holds (a CUDA user object whose destructor files it: pair.c, stage.c),
 * then frees h.  Switches the current device as needed (current_device:
 * the one current now, updated).  rank: for the warning when CUDA refuses.
 */
void mpn_graph_holds_attach(mpn_graph_holds_t* h, int rank, int* current_device);

/** Reports a captured import (mpn_ipc_mark_captured) and notes its pin, so
 *  that the import may be closed again once the graph is gone. */
void mpn_graph_holds_add_import(mpn_graph_holds_t** h, cudaStream_t s, int dev, const mpn_ipc_ref_t* ref);

/** mpn_graph_holds_attach from the device current now, current again after. */
void mpn_graph_holds_attach_here(mpn_graph_holds_t* h, int rank);

#endif /* MPN_P2P_GRAPHS_H_ */
