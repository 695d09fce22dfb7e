/*
 * order.h - which stream each slot of a pair side last served, so that
 * messages seq and seq + MPN_PAIR_SLOTS, which share a slot and its flag
 * words, are ordered when they come from different streams (p2p.c,
 * issue.c; docs/P2P.md, known problem 5).  Host state only.
 */
#ifndef MPN_P2P_ORDER_H_
#define MPN_P2P_ORDER_H_

#include <stdint.h>

/** The streams of one pair side: no table while it has seen one stream. */
typedef struct {
  int state;        /**< 0: no message yet; 1: first is known; 2: no memory for a table */
  uint64_t first;   /**< the stream (mpn_cuda_stream_id) of the first message */
  uint64_t* table;  /**< once a second stream is seen: each slot's last stream */
} mpn_slot_streams_t;

/**
 * Notes that message seq (>= 1) of the side comes from stream and returns
 * whether the slot's previous message (seq - MPN_PAIR_SLOTS) came from
 * another one.  Without memory for the table every later message counts
 * as from another stream (a wait that is at once satisfied on one stream).
 */
int mpn_slot_streams_note(mpn_slot_streams_t* s, uint64_t seq, uint64_t stream);

/** Frees the table (the struct may be noted into again). */
void mpn_slot_streams_free(mpn_slot_streams_t* s);

#endif /* MPN_P2P_ORDER_H_ */
