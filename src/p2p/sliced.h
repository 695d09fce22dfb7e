/*
 * sliced.h - a launch's choices where processes time-slice their GPU (no
 * MPS).  With one other process of the GPU, one of the two moves both
 * directions (delegation) unless the ranks compute between launches (gap.h);
 * then, and with several such processes, messages take the receivers'
 * inboxes (eager.h).  Private to src/p2p.
 */
#ifndef MPN_P2P_SLICED_H_
#define MPN_P2P_SLICED_H_

#include "core/enqueue.h"
#include "p2p/plan.h"

/** Whether op's peer is another process on this rank's time-sliced GPU. */
int mpn_sliced_peer(const mpn_op_t* op);

/** Whether the launch's prepared messages with processes of this rank's
 * time-sliced GPU all go to one peer (of one communicator). */
int mpn_sliced_one_peer(const plan_t* plans, int n);

/** The launch's first prepared message, not captured, with a process of
 * this rank's time-sliced GPU (its stream is where gap.h times), or NULL. */
const plan_t* mpn_sliced_timed(const plan_t* plans, int n);

/**
 * Whether the launch delegates: one_peer (mpn_sliced_one_peer) and not both
 * computes (gap.h) and a message with that process that may take the
 * inbox.  A delegating launch's messages with processes of the GPU lose
 * their inbox (plan_t.eager_ok).
 */
int mpn_sliced_inbox(plan_t* plans, int n, int one_peer, int computes);

/**
 * Where delegating: waits on the host, at most MPINCCL_DELEGATE_WAIT_US for
 * the whole launch, until the peer has posted each message this rank would
 * move both ways (the lower rank of the two).  Returns the index of the plan
 * whose wait ran out, or -1.
 */
int mpn_sliced_delegate_wait(const plan_t* plans, int n, int delegating);

#endif /* MPN_P2P_SLICED_H_ */
