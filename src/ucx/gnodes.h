/*
 * gnodes.h - the host-node state of one-sided calls over UCX captured in
 * CUDA graphs (gnodes.c): made at capture, its commands posted at every
 * replay, freed once the graphs holding it are gone and the proxy holds
 * none of its commands.
 */
#ifndef MPN_UCX_GNODES_H_
#define MPN_UCX_GNODES_H_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "p2p/graphs.h"
#include "ucx/gone.h"
#include "ucx/node_guard.h"
#include "ucx/proxy.h"

struct ncclComm;

/** A captured put or signal (sender) or captured waits (target). */
typedef struct mpn_ucx_gnode {
  struct ncclComm* comm;
  int n;                      /**< commands per replay */
  mpn_ucx_cmd_t* cmds;        /**< posted as they are at each replay (made from mpn_ucx_gnode_cmd) */
  uint64_t* zero;             /**< sender: its flag of the slot, zeroed before posting (or NULL) */
  char* stage;                /**< sender: pinned copy of the put's source (or NULL) */
  uint64_t done;              /**< completions (nobody waits for them) */
  int error;                  /**< set by the proxy when a command failed */
  int pending;                /**< commands posted and not yet done with by the proxy (atomic) */
  mpn_ucx_gone_t* gone;       /**< set once its graphs are gone; NULL: kept until the communicator goes */
  mpn_ucx_node_guard_t guard; /**< against the communicator's free */
  struct mpn_ucx_gnode* next;
} mpn_ucx_gnode_t;

/** A gnode of comm for n commands, with a pinned stage of that many bytes
 *  (0: none; allocated in relaxed capture mode, as during a capture). */
ncclResult_t mpn_ucx_gnode_create(struct ncclComm* comm, int n, size_t stage, mpn_ucx_gnode_t** out);

/** A put-with-signal command of g to peer, its words g's; the caller fills
 *  in what it moves. */
mpn_ucx_cmd_t mpn_ucx_gnode_cmd(mpn_ucx_gnode_t* g, int peer);

/**
 * Notes in *holds (the launch's notes, p2p/graphs.h) that the graph stream
 * s (of device dev) captures holds g: its record marks g gone once that
 * graph and every executable graph made from it are destroyed.  Out of
 * memory, or where the record is not hung, g stays until its communicator goes.
 */
void mpn_ucx_gnode_watch(mpn_ucx_gnode_t* g, mpn_graph_holds_t** holds, cudaStream_t s, int dev);

/** The news of a record (mpn_graph_news_fn, owner g's mark): g's graphs
 *  are gone (seq 0: no record was hung; only lets go of the mark). */
void mpn_ucx_gnode_gone(void* owner, uint32_t slot, uint64_t seq, int side);

/** Captures on s the host node that posts g's commands at each replay;
 *  what: for the error text. */
ncclResult_t mpn_ucx_gnode_enqueue(mpn_ucx_gnode_t* g, cudaStream_t s, const char* what);

/** Frees the gnodes of *list that may go (mpn_ucx_gnode_reclaim), then adds g. */
void mpn_ucx_gnode_push(mpn_ucx_gnode_t** list, mpn_ucx_gnode_t* g);

/**
 * Frees the gnodes of *list whose graphs are gone and whose commands the
 * proxy no longer holds, none of them failed (UCX may still read the stage
 * of a failed one: it goes with the communicator).  API thread, in relaxed
 * capture mode where it frees a stage.
 */
void mpn_ucx_gnode_reclaim(mpn_ucx_gnode_t** list);

/** How many gnodes list holds (tests). */
int mpn_ucx_gnode_count(const mpn_ucx_gnode_t* list);

/** Whether the proxy holds none of list's commands and none failed (after
 *  mpn_ucx_gnode_kill_list, no replay posts more). */
int mpn_ucx_gnode_list_idle(const mpn_ucx_gnode_t* list);

/** Marks list's gnodes dead, waiting for a host node running now: later
 *  replays post nothing (before the communicator's UCX state goes). */
void mpn_ucx_gnode_kill_list(mpn_ucx_gnode_t* list);

/**
 * Frees list's gnodes after their communicator's UCX work was closed (the
 * proxy writes into them until then).  leak: UCX may still read the
 * stages, which are leaked.  A gnode whose graphs are not gone is kept
 * whole, its host node dead, until they are (orphans.h); one
 * that failed, or whose graphs cannot tell, stays allocated without its
 * commands for a late host node to read its mark.
 */
void mpn_ucx_gnode_free_list(mpn_ucx_gnode_t* list, int leak);

#endif /* MPN_UCX_GNODES_H_ */
