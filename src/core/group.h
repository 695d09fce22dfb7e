/*
 * group.h - ncclGroupStart/ncclGroupEnd: per-thread nesting, the operations,
 * creation jobs and window registrations collected inside a group, and the
 * first error raised in it (which ncclGroupEnd returns, discarding the
 * whole group).
 */
#ifndef MPN_CORE_GROUP_H_
#define MPN_CORE_GROUP_H_

#include "core/comm.h"
#include "core/enqueue.h"
#include "nccl.h"

/** Most ncclGroupStart calls a thread may have open at once. */
#define MPN_GROUP_MAX_DEPTH (1 << 20)

/** Operations a thread's group holds without a heap allocation of its own
 *  (group.c); those past that many come from the heap. */
#define MPN_GROUP_OPS_KEPT 16

/** Nesting depth of the calling thread's group (0: none). */
int mpn_group_depth(void);

/**
 * Adds an operation (copied) to the calling thread's group; outside a group
 * it forms a group of its own and is launched at once.  op->descs belongs
 * to the group from here on, also when this fails.
 */
ncclResult_t mpn_group_add_op(const mpn_op_t* op);

/**
 * What the calling thread's open group holds for comm and peer, not yet
 * launched: its receives from peer (kind MPN_OP_RECV), or the signals of
 * peer on ctx its waits count (MPN_OP_WAIT_SIGNAL).  For the checks of a
 * call naming a peer that ended its communicator (core/enqueue.c).
 */
uint64_t mpn_group_queued(const struct ncclComm* comm, mpn_op_kind_t kind, int peer, int ctx);

/** Adds a communicator creation job (ownership passes to the group). */
ncclResult_t mpn_group_add_job(mpn_init_job_t* job);

struct mpn_win_job;

/** Adds a window (de)registration made inside a group (rma/wingroup.h;
 *  ownership passes to the group).  Inside a group only. */
ncclResult_t mpn_group_add_win(struct mpn_win_job* job);

/** Whether the calling thread's open group holds a job that makes comm or
 *  splits it, or a window (de)registration of comm (they run at
 *  ncclGroupEnd, so comm cannot go before). */
int mpn_group_has_job_of(const struct ncclComm* comm);

/**
 * Records an error raised inside a group by an API call; returns res so the
 * call can return it too.
 */
ncclResult_t mpn_group_fail(ncclResult_t res);

#endif /* MPN_CORE_GROUP_H_ */
