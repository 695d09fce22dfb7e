/*
 * staged.h - ncclSend/ncclRecv of device memory with a peer reached over UCX
 * (UCX without CUDA support): stream-ordered, staged through pinned host
 * buffers in a pipeline, triggered by the stream (see staged.c).
 */
#ifndef MPN_UCX_STAGED_H_
#define MPN_UCX_STAGED_H_

#include "core/enqueue.h"
#include "nccl.h"

struct ncclComm;

/** Refusals that must come before anything of a group is launched; makes
 * the message's lane (stream, pinned buffers) if it is its first. */
ncclResult_t mpn_ucx_staged_check(const mpn_op_t* op);

/**
 * First step of a group's launch, before any of its other work is enqueued:
 * every lane the n ops (all with UCX peers) use waits for an event recorded
 * now on the ops' streams.
 */
ncclResult_t mpn_ucx_staged_fork(mpn_op_t** ops, int n);

/**
 * Enqueues the ops' chunks on their lanes (after mpn_ucx_staged_fork, before
 * the group's other work: see staged.c); the API thread never waits for the
 * network or a peer.
 */
ncclResult_t mpn_ucx_staged_launch(mpn_op_t** ops, int n);

/** Last step of a group's launch: the ops' streams wait for the lanes'
 * ends (and captured groups are joined back). */
ncclResult_t mpn_ucx_staged_join(mpn_op_t** ops, int n);

/** Lets go of every lane's waits for the proxy (an abort, after the
 * proxy dropped comm's operations): later chunks find their words reached. */
void mpn_ucx_staged_release(struct ncclComm* comm);

/**
 * Waits until comm's lanes did their work and the proxy finished their sends
 * (destroy, not abort; bounded by MPINCCL_NET_TIMEOUT and ended by a
 * failure); returns whether all was found done on a communicator that did
 * not fail.  When not, what peers or streams may still use is leaked, not
 * freed (the lanes' buffers here, the one-sided state in winstage.c).
 */
int mpn_ucx_staged_quiesce(struct ncclComm* comm);

/** Waits until comm's sends and puts over UCX were taken by UCX (a window
 * going away; bounded by MPINCCL_NET_TIMEOUT, ncclRemoteError past it). */
ncclResult_t mpn_ucx_staged_drain(struct ncclComm* comm);

/** Marks comm's captured send/receive groups dead (mpn_ucx_graph_kill_list). */
void mpn_ucx_staged_kill_graphs(struct ncclComm* comm);

/** Frees comm's staging buffers (after its UCX operations were closed). */
void mpn_ucx_staged_free(struct ncclComm* comm);

#endif /* MPN_UCX_STAGED_H_ */
