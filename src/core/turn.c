/*
 * turn.c - tickets in call order, served one at a time (turn.h).
 */
#include "core/turn.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/error.h"

/*
 * Turns: a ticket taken on the calling thread, in the order of its calls;
 * the job waits for its turn before its collectives and ends it after.  A
 * job aborted while it waits, or released without having run, gives its
 * turn up instead (turn_give_up): the order passes over it when it comes,
 * since ending it early would let a later ticket run beside an earlier one
 * that still holds the order.  Two orders use them:
 * - the collectives of one communicator over its bootstrap
 *   (ncclComm.split_order): its splits and its window registrations and
 *   deregistrations (rma/window.c).  Two non-blocking splits issued back to
 *   back would otherwise take the parent's split and collective numbers in
 *   either order, differently on different processes, and a window call
 *   made while a non-blocking split runs shared its messages' tags;
 * - the MPI collectives of creation one thread asked for (mpincclCommInitMPI's
 *   set-up, the MPI_Comm_split of MPI-made communicators' splits), whatever
 *   their communicators: a group's jobs, and non-blocking ones, run on
 *   threads, and two at once could pair their collectives wrongly on one MPI
 *   communicator or, below MPI_THREAD_MULTIPLE, block the channel another
 *   job's bootstrap needs while its peers wait for it.  Calls of different
 *   threads stay independent, as MPI's are; a thread's order outlives it
 *   (jobs may still hold it).
 */
void mpn_turn_take(mpn_order_t* order, mpn_turn_t* turn) {
  if (order == NULL) return; /* out of memory: unordered, as before */
  turn->order = order;
  turn->ticket = __atomic_fetch_add(&order->tickets, 1, __ATOMIC_ACQ_REL);
  turn->pending = 1;
}

/* The lock is held for a few instructions, never across a wait. */
void mpn_order_lock(mpn_order_t* order) {
  while (__atomic_exchange_n(&order->lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}

void mpn_order_unlock(mpn_order_t* order) { __atomic_store_n(&order->lock, 0, __ATOMIC_RELEASE); }

/* Ends the ticket being served: serving moves to the next one not given up.
 * Lock held. */
static void order_advance(mpn_order_t* order) {
  uint64_t next = order->serving + 1;
  while (order->skipped && order->skipped->ticket == next) {
    mpn_ticket_t* t = order->skipped;
    order->skipped = t->next;
    free(t);
    next++;
  }
  __atomic_store_n(&order->serving, next, __ATOMIC_RELEASE);
}

void mpn_turn_end(mpn_turn_t* turn) {
  if (!turn->pending) return;
  turn->pending = 0;
  mpn_order_lock(turn->order);
  order_advance(turn->order);
  mpn_order_unlock(turn->order);
}

/* Gives a turn up without waiting for it: ended if it has come, else filed
 * for order_advance to pass over.  0 (still pending) if out of memory. */
int mpn_turn_give_up(mpn_turn_t* turn) {
  if (!turn->pending) return 1;
  mpn_order_t* order = turn->order;
  mpn_ticket_t* t = malloc(sizeof(*t)); /* (not under the lock) */
  int given_up = 1;
  mpn_order_lock(order);
  if (order->serving == turn->ticket) {
    order_advance(order);
  } else if (t) {
    mpn_ticket_t** at = &order->skipped;
    while (*at && (*at)->ticket < turn->ticket) at = &(*at)->next;
    t->ticket = turn->ticket;
    t->next = *at;
    *at = t;
    t = NULL;
  } else {
    given_up = 0;
  }
  mpn_order_unlock(order);
  free(t);
  if (given_up) turn->pending = 0;
  return given_up;
}

/* Waits for the turn; once *abort (may be NULL) is set, gives it up and
 * fails instead: the turn's holder may not move before the aborting thread
 * returns (below MPI_THREAD_MULTIPLE its MPI waits for the main thread,
 * which may be waiting for that thread). */
ncclResult_t mpn_turn_wait(mpn_turn_t* turn, const volatile int* abort, const char* fn) {
  if (!turn->pending) return ncclSuccess;
  while (__atomic_load_n(&turn->order->serving, __ATOMIC_ACQUIRE) != turn->ticket) {
    if (abort && *abort && mpn_turn_give_up(turn))
      return mpn_error_set(NULL, ncclRemoteError,
                           "%s: aborted while waiting for an earlier call to end (a thread's "
                           "creations, and a communicator's splits and window calls, take turns in call order)",
                           fn);
    mpn_chan_drive(MPN_CHAN_DRIVE_CREATE); /* the turn's holder may be a worker that needs this thread's MPI */
    usleep(100);
  }
  return ncclSuccess;
}

/* Lets a turn the job will not use pass, in order; waits for it only when
 * out of memory. */
void mpn_turn_pass(mpn_turn_t* turn) {
  if (mpn_turn_give_up(turn)) return;
  (void)mpn_turn_wait(turn, NULL, NULL);
  mpn_turn_end(turn);
}
