/*
 * p2p.h - the send/receive engine: turns a group's sends and receives into
 * stream work on the transports chosen per peer.
 */
#ifndef MPN_P2P_P2P_H_
#define MPN_P2P_P2P_H_

#include "core/enqueue.h"
#include "cuda/lanes.h"

struct ncclComm;

/** The checks of a group's sends and receives that precede posting any (check.c). */
ncclResult_t mpn_p2p_check(mpn_op_t* ops);

/**
 * Schedules a group's sends and receives (any communicators; program
 * order; every op already passed mpn_p2p_check).  Returns once the work is
 * enqueued on the streams; never waits for a peer.  dev: the calling
 * thread's current device as the caller knows it (-1: CUDA could not
 * tell), current again on return.
 */
ncclResult_t mpn_p2p_launch(mpn_op_t* ops, int dev);

struct mpn_pair;

/**
 * The shared-memory pairs of this rank with a peer of the same host (mapped
 * on first use): send carries this rank's messages and signals to peer,
 * recv the peer's to this rank.  One-sided signals use them too.
 */
ncclResult_t mpn_p2p_pairs(struct ncclComm* comm, int peer, struct mpn_pair** send,
                           struct mpn_pair** recv);

/** Folds errors peers found in this communicator's messages into its async error. */
void mpn_p2p_poll_errors(struct ncclComm* comm);

/**
 * Maps, at communicator creation, the pairs with the peers in this process
 * (the others are mapped on first use).  Registering memory with CUDA may
 * wait for the device, and a thread's stream may be waiting for another
 * thread's next group: such a wait inside ncclGroupEnd would never end.
 */
ncclResult_t mpn_p2p_connect_local(struct ncclComm* comm);

/**
 * Releases every stream flag shared with peer (its process is gone), so that
 * no stream of this rank waits for it any longer.  The calling thread's
 * current device is left as it was.
 */
void mpn_p2p_release_peer(struct ncclComm* comm, int peer);

/** The pairs of comm with peer made so far ([0] send, [1] receive; NULL where
 *  none), without making any: for other threads (the watchdog). */
void mpn_p2p_pairs_made(const struct ncclComm* comm, int peer, struct mpn_pair* pairs[2]);

/** The messages comm numbered with peer so far, [side][plain, captured]
 *  (side: MPN_SIDE_SEND, MPN_SIDE_RECV of pair.h), read as another thread
 *  may be launching; zeros while none. */
void mpn_p2p_counts(const struct ncclComm* comm, int peer, uint64_t out[2][2]);

/**
 * At a normal destroy of comm, once its streams are done: records in every
 * pair it shares with a peer how many messages this rank posted there, and
 * marks its side of the pair left (after mpn_rma_mark_left's counts), so
 * that the peer's watchdog, finding this process gone, can tell a normal
 * end from a failure (mpn_p2p_peer_left).
 */
void mpn_p2p_mark_left(struct ncclComm* comm);

/**
 * Whether peer, whose process is gone, left normally as far as send/receive
 * goes: comm shares pairs with it, and peer marked every one left having
 * posted at least the messages this rank posted there (none of this rank's
 * waits for it).  Without a shared pair nothing tells (0).  The one-sided
 * signals: mpn_rma_peer_left.
 */
int mpn_p2p_peer_left(const struct ncclComm* comm, int peer);

/**
 * A receive (caller: the API call's name) from peer, which ended its
 * communicator normally and exited (MPN_PEER_LEFT), with `ahead` receives
 * from it in the calling thread's open group before it: ncclSuccess when
 * the message it takes is one the peer posted into the inbox of a pair
 * block this process made, which outlives the peer (left.c), so the
 * receive takes it as any other; else ncclRemoteError, saying why.
 */
ncclResult_t mpn_p2p_left_recv(struct ncclComm* comm, const char* caller, int peer, uint64_t ahead);

/** Whether peer aborted its communicator (it marks the pairs it shares with
 *  this rank, mpn_p2p_mark_aborted): the flags it released may need
 *  releasing again (a captured wait puts its flag back after it). */
int mpn_p2p_peer_aborted(const struct ncclComm* comm, int peer);

/**
 * Marks the pairs comm shares with peer (every peer: -1) aborted, by plain
 * stores into their shared host memory: the flag kernels' waits on them,
 * on both sides, let go without their flags (cuda/sync.h, escape), and the
 * peers learn of it.  For an abort, and for a peer found gone.
 */
void mpn_p2p_mark_aborted(struct ncclComm* comm, int peer);

/**
 * For ncclCommAbort, once no launch of comm is running: tells every peer it
 * shares a pair with (ncclRemoteError through ncclCommGetAsyncError) and
 * releases every flag of those pairs, so that no stream of this rank waits
 * for a peer that will not write and freeing the pairs' device memory
 * (which synchronizes the device) cannot hang.
 */
void mpn_p2p_abort(struct ncclComm* comm);

/**
 * For ncclCommAbort, after mpn_p2p_abort and the other transports' releases:
 * releases every pair of comm again and again until the device is idle, at
 * most MPINCCL_ABORT_DRAIN_MS.  A graph's captured wait puts its flag back
 * to 0 after it, so each queued replay takes one release, and freeing the
 * pairs (which synchronizes the device) would wait for the next for good.
 * release_more, unless NULL, runs in each round too (the other transports'
 * captured waits), and then the rounds run even where comm has no pairs.
 * Returns 0 if the device still had work then: the pairs must not be freed.
 */
int mpn_p2p_abort_drain(struct ncclComm* comm, void (*release_more)(struct ncclComm*));

/** Releases the communicator's point-to-point state; abandon: the pairs'
 *  memory stays mapped (mpn_p2p_abort_drain gave up), the rest goes. */
void mpn_p2p_free(struct ncclComm* comm, int abandon);

/** The communicator's copy lanes (issue.c: large copies to other GPUs). */
mpn_lanes_t* mpn_p2p_lanes(struct ncclComm* comm);

/** How comm's messages went so far: through the inbox's small and big rings
 * (eager[0], eager[1]), how many first sides found their slot in use
 * (no_slot), and how many waited on the host for it (slot_waits, a
 * time-sliced GPU; may be NULL).  For tests and the destroy log. */
void mpn_p2p_stats(const struct ncclComm* comm, uint64_t eager[2], uint64_t* no_slot, uint64_t* slot_waits);

/** How many first sides of messages between ranks of this process stopped
 *  waiting for their second side's "done" event (MPINCCL_LOCAL_WAIT_US) and
 *  took the flag instead, since the process started.  For tests. */
uint64_t mpn_p2p_done_given_up(void);

/** Sends of comm that waited for their peer's receive and moved their own
 * data (pushed; push.h), and those whose wait ran out (timeouts).  For
 * tests and the destroy log. */
void mpn_p2p_push_stats(const struct ncclComm* comm, uint64_t* pushed, uint64_t* timeouts);

/** Counts of the graph slots' hand-back in this process (tests, logs). */
typedef struct {
  uint64_t attached;     /**< records hung on graphs being captured (graphs.c) */
  uint64_t not_attached; /**< records CUDA refused: their slots stay held */
  uint64_t released;     /**< records whose graph is gone (destructor run) */
  uint64_t filed;        /**< slot sides filed by those destructors */
  uint64_t marked;       /**< slot sides marked released in their pair */
  uint64_t orphaned;     /**< slot sides whose pair was unmapped meanwhile */
} mpn_graph_stats_t;

/** The graph slots' hand-back so far in this process (p2p/graphs.c). */
void mpn_p2p_graph_stats(mpn_graph_stats_t* out);

#endif /* MPN_P2P_P2P_H_ */
