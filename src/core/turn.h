/*
 * turn.h - turns: collectives that must run in the order a thread called
 * them, though they run on other threads (non-blocking creations, the
 * calls of a group), take a ticket at the call and wait for it (turn.c).
 */
#ifndef MPN_CORE_TURN_H_
#define MPN_CORE_TURN_H_

#include "core/comm.h"
#include "nccl.h"

/** Takes the next ticket of order (NULL: out of memory, unordered) for turn. */
void mpn_turn_take(mpn_order_t* order, mpn_turn_t* turn);

/** Waits for turn's ticket to be served; once *abort (may be NULL) is set,
 *  gives the turn up and fails (ncclRemoteError, naming fn). */
ncclResult_t mpn_turn_wait(mpn_turn_t* turn, const volatile int* abort, const char* fn);

/** Ends a turn that came (after its collective): the next ticket is served. */
void mpn_turn_end(mpn_turn_t* turn);

/** Gives a turn up without waiting for it; 0 (still pending) if out of memory. */
int mpn_turn_give_up(mpn_turn_t* turn);

/** Lets a turn that will not be used pass, in order. */
void mpn_turn_pass(mpn_turn_t* turn);

/** The order's lock: held for a few instructions, never across a wait. */
void mpn_order_lock(mpn_order_t* order);
void mpn_order_unlock(mpn_order_t* order);

#endif /* MPN_CORE_TURN_H_ */
