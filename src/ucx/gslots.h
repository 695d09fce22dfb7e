/*
 * gslots.h - which graph slots of one-sided calls over UCX this side may
 * give out again: per slot and side, the last signal whose graphs this
 * process destroyed and the capture that took the slot's last signal.
 * The peer's words are not here (winstage.c reads its "gfree" word).
 */
#ifndef MPN_UCX_GSLOTS_H_
#define MPN_UCX_GSLOTS_H_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "p2p/graphs.h"

/** A communicator's slot words, in process memory and counted: the record
 *  of a graph destroyed after its communicator still finds them. */
typedef struct mpn_ucx_gslots mpn_ucx_gslots_t;

/** What mpn_ucx_gslots_state finds. */
enum { MPN_UCX_GSLOT_HELD, MPN_UCX_GSLOT_FREE, MPN_UCX_GSLOT_OWN };

/** n slots (flat index), none released, held by the caller; NULL out of memory. */
mpn_ucx_gslots_t* mpn_ucx_gslots_create(size_t n);

/** Lets go of the caller's hold (the communicator goes); the words go with
 *  the last record that names them. */
void mpn_ucx_gslots_destroy(mpn_ucx_gslots_t* g);

/**
 * Signal seq takes slot i on side (MPN_SIDE_*) for capture (CUDA's id): notes
 * the capture, and in *h (rma.c's launch notes, p2p/graphs.h) that the
 * graph of stream s (device dev) holds it until destroyed.
 */
void mpn_ucx_gslots_take(mpn_ucx_gslots_t* g, mpn_graph_holds_t** h, cudaStream_t s, int dev, uint32_t i, uint64_t seq,
                         int side, unsigned long long capture);

/** The news of a record (mpn_graph_news_fn, owner a mpn_ucx_gslots_t):
 *  the graphs holding signal seq in slot i on side are gone (seq 0: none). */
void mpn_ucx_gslots_released(void* g, uint32_t i, uint64_t seq, int side);

/**
 * Whether slot i may take a signal on side: MPN_UCX_GSLOT_FREE once the
 * graphs holding its previous signal prev are gone on this side,
 * MPN_UCX_GSLOT_OWN while capture (non-zero) itself holds it (no wait can
 * free it), MPN_UCX_GSLOT_HELD otherwise.
 */
int mpn_ucx_gslots_state(const mpn_ucx_gslots_t* g, uint32_t i, uint64_t prev, int side, unsigned long long capture);

/** The last signal of slot i released on side (tests). */
uint64_t mpn_ucx_gslots_released_up_to(const mpn_ucx_gslots_t* g, uint32_t i, int side);

#endif /* MPN_UCX_GSLOTS_H_ */
