/*
 * sync_plan.h - a launch's halves as one flag kernel (cuda/sync.h), for the
 * issuer (issue.c).  Private to src/p2p.
 */
#ifndef MPN_P2P_SYNC_PLAN_H_
#define MPN_P2P_SYNC_PLAN_H_

#include "p2p/plan.h"

/**
 * Whether halves half0..half1 of stream s's posted plans (0 the front, 1 the
 * back) fit one flag kernel: every message with a rank whose kernels run
 * beside ours, flags and copies within the table, bytes within
 * MPINCCL_KERNEL_SYNC (of several blocks when grid, else of one).  With
 * if_wanted, also whether the kernel pays: eager messages, or at least
 * MPINCCL_KERNEL_SYNC_WAITS waits.
 */
int mpn_p2p_sync_fits(const plan_t* plans, int n, cudaStream_t s, int half0, int half1, int grid, int if_wanted);

/**
 * Issues halves half0..half1 of stream s as one kernel, each phase a round
 * (its copies on several blocks when grid: the launch has this stream only).
 * *issued is 0, with nothing enqueued, where the table refused an operation
 * or the kernel got too few blocks for its bytes: the caller then issues
 * memory operations.  ends: the kernel is the launch's last item on s, so
 * it carries the finalize's mark (core/drain.h).
 */
ncclResult_t mpn_p2p_sync_issue(const mpn_driver_t* drv, plan_t* plans, int n, cudaStream_t s, int half0, int half1,
                                int grid, int ends, int* issued);

#endif /* MPN_P2P_SYNC_PLAN_H_ */
