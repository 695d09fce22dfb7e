/*
 * winstage.h - one-sided operations with peers over UCX (UCX without CUDA
 * support): windows mirrored in host memory, puts staged like sends, and
 * signals carrying a descriptor of their put (see winstage.c).
 */
#ifndef MPN_UCX_WINSTAGE_H_
#define MPN_UCX_WINSTAGE_H_

#include <cuda.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "core/enqueue.h"
#include "cuda/driver.h"
#include "nccl.h"
#include "p2p/graphs.h"
#include "ucx/gnodes.h"
#include "ucx/gslots.h"
#include "ucx/net.h"

struct ncclComm;
typedef struct mpn_ucx_win mpn_ucx_win_t;

/** Signal slots per peer for one-sided calls captured in CUDA graphs (the
 * path within a host has as many, MPN_PAIR_RMA_GRAPH, split among contexts;
 * a context's serve its signals in turn). */
#define MPN_UCX_GRAPH_SLOTS 256

/**
 * Collective over comm (which has UCX state): makes the communicator's
 * signal area on first use, then a host mirror of this rank's window part
 * (bytes at base on the device) that the UCX peers can put into.
 */
ncclResult_t mpn_ucx_win_register(struct ncclComm* comm, void* base, size_t bytes,
                                  mpn_ucx_win_t** out);

/**
 * Collective: waits until this rank's puts over UCX are done (bounded by
 * MPINCCL_NET_TIMEOUT), then unmaps and frees the mirror once every rank
 * got there.
 */
ncclResult_t mpn_ucx_win_deregister(struct ncclComm* comm, mpn_ucx_win_t* w);

/** Not collective (communicator going away): w is freed with the
 * communicator's UCX one-sided state, after the proxy closed its work. */
void mpn_ucx_win_retire(struct ncclComm* comm, mpn_ucx_win_t* w);

/**
 * Posts to the proxy the UCX part of one chunk of op (a put or a signal
 * with a UCX peer): bytes [off, off + len) of the put, staged at buf, into
 * the peer's mirror; with last, the signal (numbered op->seq) and its
 * descriptor.  Started when the trigger comes; see mpn_ucx_cmd_t for flag,
 * error and release.
 */
ncclResult_t mpn_ucx_rma_post(const mpn_op_t* op, void* buf, size_t off, size_t len, int last,
                              const mpn_ucx_trigger_t* when, uint64_t* flag, uint64_t value,
                              int* error, uint64_t* release, int nrelease);

/** Device address of the counter of signals from peer on ctx (a stream waits on it). */
CUdeviceptr mpn_ucx_rma_counter(struct ncclComm* comm, int peer, int ctx);

/** Whether a wait of this rank (not captured) still expects signals from
 * peer that have not come: counts waited for above the counter on some ctx. */
int mpn_ucx_rma_waiting_for(struct ncclComm* comm, int peer);

/** Whether this rank captured a one-sided call with peer in a CUDA graph
 *  (a signal to it, or a wait for its signals): any replay may then wait
 *  for the peer (its signal, or its acknowledgement of this rank's), and
 *  the host cannot see whether one is queued. */
int mpn_ucx_rma_captured_with(struct ncclComm* comm, int peer);

/**
 * Enqueues on stream, after its waits, the kernel that lands the puts of
 * the signals expected - n + 1 .. expected from peer on ctx, for n[i],
 * peer[i], ctx[i], expected[i] (i < count).
 */
ncclResult_t mpn_ucx_rma_apply(struct ncclComm* comm, const int* peer, const int* ctx,
                               const uint64_t* expected, const int* n, int count, cudaStream_t stream);

/**
 * A put or signal with a UCX peer captured in a CUDA graph, the seq-th
 * captured on its context, in the slot given (rma.c numbers captured
 * signals per peer and context as it does within a host): enqueued on op's
 * stream (see winstage.c).  Its host-node state is freed once the graph is
 * gone (*holds: the launch's notes, p2p/graphs.h) and the proxy is done
 * with it.
 */
ncclResult_t mpn_ucx_rma_graph_signal(const mpn_driver_t* drv, mpn_graph_holds_t** holds, mpn_op_t* op, int slot,
                                      uint64_t seq);

/**
 * Whether peer's graph slot `slot` may take a captured signal (send) or a
 * count of a captured wait, its previous one being prev: MPN_UCX_GSLOT_FREE
 * once this side's graphs holding prev are destroyed and (send) the peer
 * took prev's last replay, MPN_UCX_GSLOT_OWN while capture itself holds it,
 * else MPN_UCX_GSLOT_HELD (ucx/gslots.h).
 */
int mpn_ucx_rma_graph_slot_state(struct ncclComm* comm, int peer, int slot, uint64_t prev, int send,
                                 unsigned long long capture);

/** Signal seq takes peer's slot on this side for capture; *holds (the
 *  launch's notes, p2p/graphs.h) gives it back once stream s's graph is gone. */
void mpn_ucx_rma_graph_take(struct ncclComm* comm, mpn_graph_holds_t** holds, cudaStream_t s, int peer, int slot,
                            uint64_t seq, int send, unsigned long long capture);

/** Device address of the word a captured wait for peer's signal in slot waits on (>= 1). */
CUdeviceptr mpn_ucx_rma_graph_flag(struct ncclComm* comm, int peer, int slot);

/**
 * After a captured wait's stream waits (on mpn_ucx_rma_graph_flag): lands
 * the puts of the count signals from peer[i] on ctx[i] in that context's
 * slots first_k[i] .. first_k[i] + n[i] - 1, empties the slots and gives
 * them back to their senders, on stream; holds as for mpn_ucx_rma_graph_signal.
 */
ncclResult_t mpn_ucx_rma_graph_land(const mpn_driver_t* drv, mpn_graph_holds_t** holds, struct ncclComm* comm,
                                    const int* peer, const int* ctx, const uint64_t* first_k, const int* n, int count,
                                    cudaStream_t stream);

/** How many captured one-sided calls' host-node states comm still holds (tests). */
int mpn_ucx_rma_graph_nodes(const struct ncclComm* comm);

/** Whether comm can take one-sided operations over UCX (a window was registered). */
int mpn_ucx_rma_ready(const struct ncclComm* comm);

/** Folds a descriptor found overwritten into the communicator's async error. */
void mpn_ucx_rma_poll_errors(struct ncclComm* comm);

/** Lets go of the streams waiting for signals over UCX (an abort): every
 * counter reads as reached. */
void mpn_ucx_rma_release(struct ncclComm* comm);

/**
 * Frees comm's one-sided UCX state and windows.  leak (an abort or a
 * failure; call it after comm's UCX work was closed): streams waiting on the
 * counters are let go, and the memory and keys are leaked, not freed, as
 * peers may still put into it; else call it before the endpoints close.
 */
void mpn_ucx_rma_free(struct ncclComm* comm, int leak);

/**
 * Before a clean destroy frees comm's one-sided state (after
 * mpn_ucx_rma_kill_graphs): waits until the proxy holds none of the
 * captured calls' commands, which name the peers' keys and this rank's
 * stage (within MPINCCL_NET_TIMEOUT), and until each peer took the last
 * replayed captured signal of this rank, whose acknowledgement it puts
 * into this rank's signal area (within MPN_UCX_ACK_WAIT_MS).  Returns 0 if
 * either did not happen or the communicator failed: the state must then
 * be leaked (mpn_ucx_rma_free with leak), not freed under them.
 */
int mpn_ucx_rma_quiesce(struct ncclComm* comm);

/** How long a destroy waits for the peers' acknowledgements of captured
 * signals (mpn_ucx_rma_quiesce) before it leaks the signal area instead. */
#define MPN_UCX_ACK_WAIT_MS 2000

/** Hands g, the host-node state of a captured one-sided call, to comm,
 *  which frees it once its graphs are gone and the proxy is done with it
 *  (earlier ones at this call), or at its own end. */
void mpn_ucx_rma_graph_keep(struct ncclComm* comm, mpn_ucx_gnode_t* g);

/** Marks comm's captured one-sided calls dead (mpn_ucx_graph_kill_list),
 *  whether its one-sided state was freed yet or not. */
void mpn_ucx_rma_kill_graphs(struct ncclComm* comm);

/** Frees what comm's captured one-sided calls still hold (after its UCX
 * work was closed: the proxy writes into it until then; leak as for
 * mpn_ucx_rma_free).  Those whose graphs are gone went earlier, at a
 * captured launch, once the proxy was done with them. */
void mpn_ucx_rma_free_graphs(struct ncclComm* comm, int leak);

/** A peer found gone (watchdog): every wait for its signals is let go. */
void mpn_ucx_rma_release_peer(struct ncclComm* comm, int peer);

#endif /* MPN_UCX_WINSTAGE_H_ */
