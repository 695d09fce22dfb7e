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

/** A stage of at least bytes on the current device, for one message of
 *  fn (the public call, "ncclSend") on comm, whose buffer name is;
 *  ncclInvalidArgument for a size that whole IPC blocks cannot hold
 *  (within a block of SIZE_MAX).  A refusal's text names fn and name, as
 *  the user knows the call by them; it is comm's too when comm is set. */
ncclResult_t mpn_stage_get(struct ncclComm* comm, const char* fn, const char* name, size_t bytes, mpn_stage_t** out);

/** The stage's device address. */
void* mpn_stage_ptr(const mpn_stage_t* st);

/** How a stage is given back (mpn_stage_put). */
typedef enum {
  MPN_STAGE_UNUSED, /**< no stream work used it: reusable now */
  MPN_STAGE_STREAM, /**< reusable once the stream reaches this point (any stream, the legacy NULL one too) */
  MPN_STAGE_PINNED  /**< in a CUDA graph, which may replay it at any time, or maybe in use: not reused until
                         mpn_stage_unpin */
} mpn_stage_use_t;

/**
 * Gives a stage back.  stream is read only for MPN_STAGE_STREAM: NULL there
 * is the legacy default stream, whose work must complete too (before, NULL
 * meant "unused", and a stage last used on the default stream was handed
 * to another stream while that work was still queued).
 */
void mpn_stage_put(mpn_stage_t* st, cudaStream_t stream, mpn_stage_use_t use);

/**
 * The graph that captured st is destroyed: st may serve again.  Called on
 * CUDA's thread (p2p/graphs.c): it only files the news, without a lock; the
 * next mpn_stage_get takes it in.  At most once per capture of st.
 */
void mpn_stage_unpin(mpn_stage_t* st);

/** Stages held by graphs (for tests). */
int mpn_stage_pinned(void);

/** Forgets the stages of device dev (the program reset the device,
 * core/renew.h): their memory and events went with the context.  Their
 * records are kept, never freed: a graph may still unpin one. */
void mpn_stage_forget(int dev);

#endif /* MPN_P2P_STAGE_H_ */
