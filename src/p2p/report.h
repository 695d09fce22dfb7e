/*
 * report.h - what a message's side says when it cannot move data: a count
 * or datatype mismatch, a refused buffer, a failed move.  Each is told to
 * both sides, the peer's through the pair, so nobody's error is silent.
 */
#ifndef MPN_P2P_REPORT_H_
#define MPN_P2P_REPORT_H_

#include "p2p/plan.h"
#include "p2p/side.h"

/** Whether a message's two calls disagree: in count, or in datatype where
 *  they have elements (two calls of no elements agree whatever their
 *  datatypes, as over UCX, which compares bytes, and as NCCL takes them). */
static inline int mpn_plan_sides_differ(const mpn_side_t* mine, const mpn_side_t* other) {
  return mine->count != other->count || (mine->count != 0 && mine->dtype != other->dtype);
}

/** This side of p could not be posted (refused: mpn_pair_post, whose text
 *  is the thread's last error): gives back what mpn_side_describe took for
 *  mine that only a posted side hands on (the event of ranks of one
 *  process), and fails both communicators, the message numbering with the
 *  peer being out of step. */
void mpn_plan_report_refused_post(plan_t* p, const mpn_side_t* mine, ncclResult_t refused);

/** Records a count or datatype mismatch of mine and other (the peer's side)
 *  on both communicators, naming the message and both calls. */
void mpn_plan_report_mismatch(plan_t* p, const mpn_side_t* mine, const mpn_side_t* other);

/** Tells the message's other side that this side could not use the buffers
 *  (res) and moved nothing: its "done" still comes, and
 *  ncclCommGetAsyncError says why. */
void mpn_plan_report_failed_move(plan_t* p, ncclResult_t res);

/** Fails both sides of p (ncclRemoteError): this side could not enqueue its
 *  copy of the message's data (res), whose flags still come, so the data
 *  may be missing where the other side reads it. */
void mpn_plan_report_copy_lost(plan_t* p, ncclResult_t res);

/** Whether either side refused its buffer (bad: this side's refusal; other:
 *  the peer's side), so that nothing moves; says so on both sides. */
int mpn_plan_buffer_refused(plan_t* p, ncclResult_t bad, const mpn_side_t* other);

#endif /* MPN_P2P_REPORT_H_ */
