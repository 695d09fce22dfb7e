/*
 * order.c - the stream each slot of a pair side last served (order.h).
 */
#include "p2p/order.h"

#include <stdlib.h>

#include "p2p/pair.h"

int mpn_slot_streams_note(mpn_slot_streams_t* s, uint64_t seq, uint64_t stream) {
  if (s->table == NULL) {
    if (s->state == 2) return seq > MPN_PAIR_SLOTS;
    if (s->state == 0) {
      s->state = 1;
      s->first = stream;
    }
    if (stream == s->first) return 0;
    uint64_t* table = malloc(MPN_PAIR_SLOTS * sizeof(*table));
    if (table == NULL) {
      s->state = 2;
      return seq > MPN_PAIR_SLOTS;
    }
    for (int i = 0; i < MPN_PAIR_SLOTS; i++) table[i] = s->first; /* every message so far */
    s->table = table;
  }
  uint64_t prev = s->table[seq % MPN_PAIR_SLOTS];
  s->table[seq % MPN_PAIR_SLOTS] = stream;
  return seq > MPN_PAIR_SLOTS && prev != stream;
}

void mpn_slot_streams_free(mpn_slot_streams_t* s) {
  free(s->table);
  *s = (mpn_slot_streams_t){0, 0, NULL};
}
