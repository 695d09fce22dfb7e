/*
 * drain.h - what a communicator's finalize and destroy wait for: on each
 * stream its operations went to, an event recorded after its last launch
 * there, so that nothing the streams may still use is freed under them.
 */
#ifndef MPN_CORE_DRAIN_H_
#define MPN_CORE_DRAIN_H_

#include <cuda_runtime.h>

#include "nccl.h"

struct ncclComm;

/**
 * Notes that comm's operations were just enqueued on s (not a capturing
 * stream: a graph's work is the graph's owner's to wait for).  Records comm's
 * event of s there.  A failure is logged once and leaves that stream out of
 * the waits (the operations themselves are enqueued).
 */
void mpn_drain_mark(struct ncclComm* comm, cudaStream_t s);

/** 1 when every stream comm enqueued on has passed its last mark (streams
 * found done are forgotten), 0 while one has not. */
int mpn_drain_done(struct ncclComm* comm);

/**
 * Waits until mpn_drain_done: peers that fail are released by the watchdog
 * and the network timeouts, so their streams end too.  With
 * MPINCCL_FINALIZE_TIMEOUT > 0, gives up after that many seconds with
 * ncclTimeout (caller names the API call in the message); else it warns
 * every 10 s and waits on, as a stream synchronization would.
 */
ncclResult_t mpn_drain_wait(struct ncclComm* comm, const char* caller);

/** Gives the events back (the work they mark is done, or abandoned). */
void mpn_drain_free(struct ncclComm* comm);

#endif /* MPN_CORE_DRAIN_H_ */
