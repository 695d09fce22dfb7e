/*
 * graph.h - send/receive with UCX peers captured in CUDA graphs (graph.c):
 * messages staged whole, their UCX operations posted by a host node at
 * every replay.
 */
#ifndef MPN_UCX_GRAPH_H_
#define MPN_UCX_GRAPH_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "core/enqueue.h"
#include "cuda/driver.h"
#include "nccl.h"

struct ncclComm;
typedef struct mpn_ucx_ggroup mpn_ucx_ggroup_t;

/**
 * First step of a launch, with the uncaptured lanes' forks: the ops (all
 * with UCX peers) on capturing streams are staged, posted and waited for on
 * side streams forked from their streams now.
 */
ncclResult_t mpn_ucx_graph_fork(const mpn_driver_t* drv, mpn_op_t** ops, int n);

/** Last step of a launch: the capturing streams wait for their side streams;
 * the groups go to their communicators (freed with them). */
ncclResult_t mpn_ucx_graph_join(mpn_op_t** ops, int n);

/** Waits until the replays of the groups in list are done (their words all
 * set), or *error is set, or the clock (mpn_clock_now_ns) passes deadline;
 * returns whether they were done. */
int mpn_ucx_graph_quiesce(mpn_ucx_ggroup_t* list, const int* error, uint64_t deadline);

/** Marks a communicator's captured groups dead, waiting for a host node
 * running now: later replays post nothing (before its UCX state goes). */
void mpn_ucx_graph_kill_list(mpn_ucx_ggroup_t* list);

/** Frees a communicator's captured groups (leak: UCX may still hold their
 *  buffers).  Those whose graph lives on are kept whole until it is gone
 *  (orphans.h), their host nodes dead. */
void mpn_ucx_graph_free_list(mpn_ucx_ggroup_t* list, int leak);

/** Adds g to list. */
void mpn_ucx_graph_push(mpn_ucx_ggroup_t** list, mpn_ucx_ggroup_t* g);

/** Frees the groups of list whose graph is destroyed and whose sends were
 *  all taken; the others stay. */
void mpn_ucx_graph_reclaim(mpn_ucx_ggroup_t** list);

/** Groups made and not yet freed whole, in every communicator of the
 *  process: those of live graphs, and those kept for graphs that outlived
 *  their communicator (tests). */
uint64_t mpn_ucx_graph_held(void);

/** How many groups list holds (tests). */
int mpn_ucx_graph_live(const mpn_ucx_ggroup_t* list);

/* Provided by staged.c, which keeps the communicator's staging state. */

/** The number of the next captured message to (send) or from peer on comm. */
uint64_t mpn_ucx_graph_count(struct ncclComm* comm, int peer, int send);

/** Hands g to comm, which frees it once its graph is destroyed
 *  (mpn_ucx_graph_reclaim, at this call) or with its staging state. */
void mpn_ucx_graph_keep(struct ncclComm* comm, mpn_ucx_ggroup_t* g);

/** The captured groups comm still holds (tests). */
int mpn_ucx_graph_groups(const struct ncclComm* comm);

#endif /* MPN_UCX_GRAPH_H_ */
