/*
 * rma.h - one-sided operations: windows (window.h), put with signal,
 * signal, wait.  Within a host: a put is a copy into the peer's window
 * (mapped through CUDA IPC, or a plain pointer within a process) and a
 * signal is a stream write of the sender's running count into the pair
 * file the two ranks share for send/receive (pair.h); a wait is a stream
 * wait for the expected count, kept on the host.
 */
#ifndef MPN_RMA_RMA_H_
#define MPN_RMA_RMA_H_

#include <pthread.h>
#include <stdint.h>

#include "core/comm.h"
#include "core/enqueue.h"
#include "p2p/pair.h"
#include "rma/self.h"
#include "transport.h"

struct ncclComm;
struct ncclWindow_vidmem;

/** Deregistered windows a communicator keeps before it frees the oldest. */
#define MPN_WIN_RETIRED 1024

/** A communicator's one-sided state, made on first use. */
typedef struct mpn_rma {
  pthread_mutex_t lock;              /**< guards windows */
  struct ncclWindow_vidmem* windows; /**< live windows */
  /** Deregistered windows, kept (without their parts) so that no new window
   *  gets a stale handle's address while MPN_WIN_RETIRED newer ones come. */
  struct ncclWindow_vidmem* retired[MPN_WIN_RETIRED];
  unsigned retired_next;
  uint64_t registered; /**< windows registered so far (each window's serial), under lock */
  uint64_t* sent;     /**< [peer * numRmaCtx + ctx]: signals this rank enqueued to peer */
  uint64_t* expected; /**< [peer * numRmaCtx + ctx]: signals from peer waited for so far */
  uint64_t* graph_sent;     /**< the same for signals captured in CUDA graphs */
  uint64_t* graph_expected;
  unsigned long long* sent_stream; /**< [peer * numRmaCtx + ctx]: the stream (mpn_cuda_stream_id) of the
                                       last signal counted in sent */
  mpn_rma_self_t* self;            /**< [ctx]: the rank's signals to itself left out (self.h) */
} mpn_rma_t;

/** Signals a pair captures in CUDA graphs per context: the pair's graph
 *  slots shared out among the contexts, each serving again once its last
 *  signal's graphs are destroyed (rma.c, graph_slot; check.c).
 *  Only for an operation that passed its checks: numRmaCtx is then >= 1. */
static inline uint64_t mpn_rma_graph_per_ctx(const struct ncclComm* comm) {
  return MPN_PAIR_RMA_GRAPH / (uint64_t)comm->config.num_rma_ctx;
}

/** The graph slot of a context's captured signal seq (>= 1): the context's
 *  mpn_rma_graph_per_ctx slots serve its signals in turn (rma.c, check.c). */
static inline uint32_t mpn_rma_graph_slot(const struct ncclComm* comm, int ctx, uint64_t seq) {
  uint64_t per_ctx = mpn_rma_graph_per_ctx(comm);
  return (uint32_t)((uint64_t)ctx * per_ctx + (seq - 1) % per_ctx);
}

/** Index of (peer, ctx) in the per-peer counters of mpn_rma_t. */
static inline size_t mpn_rma_pc(const struct ncclComm* comm, int peer, int ctx) {
  return (size_t)peer * (size_t)comm->config.num_rma_ctx + (size_t)ctx;
}

/** Whether one-sided operations with peer go over UCX. */
static inline int mpn_rma_over_ucx(const struct ncclComm* comm, int peer) {
  return comm->transport[peer] == MPN_TRANSPORT_UCX;
}

/** The communicator's one-sided state, made on first use. */
ncclResult_t mpn_rma_state(struct ncclComm* comm, mpn_rma_t** out);

/**
 * The checks of a group's one-sided operations that need windows and
 * devices, so that a group with a bad one enqueues nothing (send/receive
 * included): call before launching anything.
 */
ncclResult_t mpn_rma_check(mpn_op_t* ops);

/** The API function an op came from ("ncclPutSignal", ...), for messages. */
const char* mpn_rma_op_name(mpn_op_kind_t kind);

/**
 * Schedules a group's one-sided operations (any communicators; program
 * order; every op already passed mpn_rma_check).  Returns once the work is
 * enqueued on the streams.  dev: the calling thread's current device as
 * the caller knows it (-1: CUDA could not tell), current again on return.
 */
ncclResult_t mpn_rma_launch(mpn_op_t* ops, int dev);

/**
 * At a normal destroy of comm (before mpn_p2p_mark_left, which marks the
 * pairs left once these counts are in): records in the pair to each peer
 * the signals this rank sent it per context, plain and captured.
 */
void mpn_rma_mark_left(struct ncclComm* comm);

/**
 * Whether peer, whose process is gone and marked its pairs left
 * (mpn_p2p_peer_left), sent at least the signals every wait of this rank
 * counted on, per context: then no wait of this rank is left waiting for it.
 */
int mpn_rma_peer_left(const struct ncclComm* comm, int peer);

/** The signals of peer on ctx that this rank's waits outside CUDA graphs
 *  counted on so far (launched ones). */
uint64_t mpn_rma_expected(const struct ncclComm* comm, int peer, int ctx);

/**
 * Whether peer ended its communicator normally and exited (MPN_PEER_LEFT)
 * having sent this rank at least need signals on ctx outside CUDA graphs:
 * a wait outside a graph for which need is the count this rank expects
 * then passes with no stream work (left.c).  *sent (may be NULL): the
 * peer's count (0 when it is not such a peer).
 */
int mpn_rma_left_covers(const struct ncclComm* comm, int peer, int ctx, uint64_t need, uint64_t* sent);

/** Frees the communicator's one-sided state and windows (not collective);
 *  abandon as for mpn_win_free_all. */
void mpn_rma_free(struct ncclComm* comm, int abandon);

#endif /* MPN_RMA_RMA_H_ */
