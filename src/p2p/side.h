/*
 * side.h - one side of a message between processes of a host: the
 * descriptor this rank posts for its buffer, and the peer's buffer mapped
 * here from the peer's descriptor.  Private to src/p2p.
 */
#ifndef MPN_P2P_SIDE_H_
#define MPN_P2P_SIDE_H_

#include <stdint.h>

#include "nccl.h"
#include "p2p/pair.h"
#include "p2p/plan.h"

/**
 * This side's descriptor of p's message; on failure one that tells the peer
 * to skip.  A buffer the peer cannot map is described by a stage of the
 * same size (p->stage; used only if this side arrives first): one from a
 * memory pool, which CUDA IPC cannot share, and a new allocation over a
 * freed one the peer still maps (cuda/ipc_held.h), which the peer is asked
 * to close (in_way_base, in_way_size).
 */
ncclResult_t mpn_side_describe(plan_t* p, mpn_side_t* d);

/** Where the peer's buffer (other) is, in this process: imported through CUDA IPC unless it is this process's. */
ncclResult_t mpn_side_resolve(plan_t* p, const mpn_side_t* other, void** ptr);

/** Does what the peer's descriptor asks of this process: closes the imports in the way of its new allocation. */
void mpn_side_heed(const mpn_side_t* other);

/** Messages this process described by a stage because the peer still mapped a freed allocation in the way (tests). */
uint64_t mpn_side_staged(void);

#endif /* MPN_P2P_SIDE_H_ */
