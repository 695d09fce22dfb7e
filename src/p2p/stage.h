/*
 * stage.h - bounce buffers for device buffers that CUDA IPC cannot share
 * (allocations from cudaMallocAsync memory pools).  The owner of such a
 * buffer copies it into a stage (send) or out of one (receive) on its own
 * stream, and its peer maps the stage instead; stages are exportable device
 * allocations kept per process and reused once the stream work that used
 * them has completed, so that a peer's import of a stage is paid once.
 */
#ifndef MPN_P2P_STAGE_H_
#define MPN_P2P_STAGE_H_

#include <cuda_runtime.h>
#include <stddef.h>

#include "nccl.h"

typedef struct mpn_stage mpn_stage_t;

/** A stage of at least bytes on the current device, for one message. */
ncclResult_t mpn_stage_get(size_t bytes, mpn_stage_t** out);

/** The stage's device address. */
void* mpn_stage_ptr(const mpn_stage_t* st);

/**
 * Gives a stage back: reusable once stream reaches this point (NULL: now);
 * graph: captured into a CUDA graph, which may replay it at any time, so
 * the stage is not reused until mpn_stage_unpin.
 */
void mpn_stage_put(mpn_stage_t* st, cudaStream_t stream, int graph);

/**
 * The graph that captured st is destroyed: st may serve again.  Called on
 * CUDA's thread (p2p/graphs.c): it only files the news, without a lock; the
 * next mpn_stage_get takes it in.  At most once per capture of st.
 */
void mpn_stage_unpin(mpn_stage_t* st);

/** Stages held by graphs (for tests). */
int mpn_stage_pinned(void);

#endif /* MPN_P2P_STAGE_H_ */
