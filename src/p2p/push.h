/*
 * push.h - between processes on different GPUs, each side moves its own
 * sends.  A process's copy-engine copies to and from one peer's CUDA IPC
 * memory run one at a time, so the usual rule (the side that posts second
 * moves the data) halves a large exchange when one side moves both
 * directions.  A send that would be moved by the peer waits, bounded, on
 * the host for the peer's receive, so that it posts second.  Private to
 * src/p2p.
 */
#ifndef MPN_P2P_PUSH_H_
#define MPN_P2P_PUSH_H_

#include <stdint.h>

#include "p2p/plan.h"

/**
 * Marks (plan_t.push) the launch's sends that should post only after the
 * peer's receive: to another process on another GPU, at least
 * MPINCCL_PUSH_MIN bytes, in a launch that also receives at least that much
 * from the same peer of the same communicator (a one-way message is moved
 * by one side anyway).  Nothing is marked where MPINCCL_PUSH_WAIT_US is 0.
 */
void mpn_push_mark(plan_t* plans, int n);

/** Whether p waits to push: marked and the peer has not yet posted its receive. */
int mpn_push_pending(const plan_t* p);

/**
 * Waits on the host until the peer of some not-yet-posted marked plan
 * (done[i] == 0) has posted its receive (returns 1), or until *deadline
 * (set on first use to MPINCCL_PUSH_WAIT_US from now) has passed or one of
 * their communicators failed (returns 0: the caller posts them as they are).
 * Every launch waits afresh: a host that runs ahead of its peer's by more
 * than the wait is slowed to within it, and from then on both sides push.
 */
int mpn_push_wait(const plan_t* plans, const char* done, int n, uint64_t* deadline);

#endif /* MPN_P2P_PUSH_H_ */
