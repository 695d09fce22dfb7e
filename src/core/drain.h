/*
 * drain.h - what a communicator's finalize and destroy wait for: on each
 * stream its operations went to, a mark after its last group there, so that
 * nothing the streams may still use is freed under them.  A mark is an event
 * recorded on the stream, or, where a group's work on a stream ends with a
 * flag kernel (cuda/sync.h) or a one-sided batch of memory operations, a
 * host word that the kernel or the batch sets last: an event between two
 * flag kernels would keep the second from being launched early, and costs
 * the host more than one more operation in a batch.
 */
#ifndef MPN_CORE_DRAIN_H_
#define MPN_CORE_DRAIN_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/driver.h"
#include "cuda/sync.h"
#include "nccl.h"

struct ncclComm;

/**
 * Before a group's launch, in the launching thread: comm's operations go to s
 * (not a capturing stream: a graph's work is the graph's owner's to wait
 * for), whose mpn_cuda_stream_id is id; rma_too: one-sided operations of
 * the group use s too (they are issued after send/receive).  ncclSystemError
 * (comm's text set) when s cannot be listed for want of memory: the group
 * must not be launched then, as comm's finalize would not wait for it.
 */
ncclResult_t mpn_drain_begin(struct ncclComm* comm, cudaStream_t s, unsigned long long id, int rma_too);

/**
 * For the flag kernel or memory-operation batch that is the last thing a
 * group's launch enqueues on s (from_rma: the one-sided engine's, else
 * send/receive's, which must leave it to a one-sided launch that follows on
 * s): the word and value it should set last (*addr 0 when it should not:
 * s has no single communicator's mark to carry, or no word).  A launch that then fails to enqueue it calls
 * mpn_drain_uncarry.
 */
void mpn_drain_carry(cudaStream_t s, int from_rma, uint64_t* addr, uint64_t* value);

/** What mpn_drain_carry was asked for did not go to s: an event instead. */
void mpn_drain_uncarry(cudaStream_t s);

/**
 * Enqueues the flag kernel k on s (mpn_sync_issue); ends: it is the
 * launch's last item on s, so it carries the finalize's mark
 * (mpn_drain_carry, given back if it could not be enqueued).
 */
ncclResult_t mpn_drain_sync_issue(const mpn_driver_t* drv, mpn_sync_t* k, cudaStream_t s, int from_rma, int ends);

/** The launch enqueues more on s after its kernels and batches (a UCX
 * lane's join): s is marked by an event, whatever asks to carry its mark. */
void mpn_drain_keep_event(cudaStream_t s);

/**
 * After the launch: marks each stream of mpn_drain_begin, by the word its
 * last kernel or batch carries or else by an event.  A failed record is
 * logged once and leaves that stream out of the waits (the operations
 * themselves are enqueued).  dev: the calling thread's current device as
 * the caller knows it (-1: CUDA could not tell), current again on return.
 */
void mpn_drain_end(int dev);

/** 1 when every stream comm enqueued on has passed its last mark (streams
 * found done are forgotten), 0 while one has not. */
int mpn_drain_done(struct ncclComm* comm);

/**
 * Waits until mpn_drain_done: peers that fail are released by the watchdog
 * and the network timeouts, so their streams end too.  failed (may be NULL)
 * returns comm's asynchronous error, if any: when the streams are still not
 * done 1 s after it first reports one, the wait ends with that error.  With
 * MPINCCL_FINALIZE_TIMEOUT > 0, it gives up after that many seconds with
 * ncclTimeout (caller names the API call in the message); else it warns
 * every 10 s and waits on, as a stream synchronization would.
 */
ncclResult_t mpn_drain_wait(struct ncclComm* comm, const char* caller, ncclResult_t (*failed)(struct ncclComm*));

/** Marks made so far by events and by words (flag kernels or batches; for tests and logs). */
void mpn_drain_counts(struct ncclComm* comm, uint64_t* by_event, uint64_t* by_kernel);

/** Gives the events and words back; where marks are still pending (abort),
 * the words' page is left allocated, as a kernel may still write it. */
void mpn_drain_free(struct ncclComm* comm);

#endif /* MPN_CORE_DRAIN_H_ */
