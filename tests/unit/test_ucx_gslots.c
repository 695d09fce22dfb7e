/*
 * test_ucx_gslots.c - the slot words of one-sided signals over UCX captured
 * in CUDA graphs (src/ucx/gslots.c): a slot is free again once the news
 * of its previous signal's graphs came, never lowered by older news; a
 * slot the asking capture took is told apart; the words outlive their
 * communicator until the last record's news.  The test plays CUDA's
 * destructor thread (mpn_ucx_gslots_released); free is watched (--wrap).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "p2p/graphs.h"
#include "p2p/pair.h"
#include "ucx/gslots.h"
#include "run_suite.h"

void __real_free(void* p);
static void* watched; /* the block whose free the test waits for */
static int watched_gone;

void __wrap_free(void* p) {
  if (p != NULL && p == watched) watched_gone = 1;
  __real_free(p);
}

/* A slot taken by signal seq of capture, its record hung (the holds go:
 * the news comes from the test, as from CUDA's thread). */
static void take(mpn_ucx_gslots_t* g, uint32_t i, uint64_t seq, int side, unsigned long long capture) {
  mpn_graph_holds_t* h = NULL;
  mpn_ucx_gslots_take(g, &h, NULL, 0, i, seq, side, capture);
  ck_assert_ptr_nonnull(h);
  free(h);
}

/* n slots' words, whose free the test watches. */
static mpn_ucx_gslots_t* create_watched(size_t n) {
  mpn_ucx_gslots_t* g = mpn_ucx_gslots_create(n);
  ck_assert_ptr_nonnull(g);
  watched = g;
  watched_gone = 0; /* (an earlier test's block went: CK_FORK=no runs them in one process) */
  return g;
}

START_TEST(free_once_released) {
  mpn_ucx_gslots_t* g = create_watched(8);
  take(g, 3, 5, MPN_SIDE_SEND, 77);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 5, MPN_SIDE_SEND, 78), MPN_UCX_GSLOT_HELD);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 5, MPN_SIDE_SEND, 0), MPN_UCX_GSLOT_HELD);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 5, MPN_SIDE_SEND, 77), MPN_UCX_GSLOT_OWN);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 5, MPN_SIDE_RECV, 77), MPN_UCX_GSLOT_HELD); /* the other side's word */
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 2, 5, MPN_SIDE_SEND, 77), MPN_UCX_GSLOT_HELD); /* another slot */
  mpn_ucx_gslots_released(g, 3, 5, MPN_SIDE_SEND);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 5, MPN_SIDE_SEND, 78), MPN_UCX_GSLOT_FREE);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 5, MPN_SIDE_RECV, 78), MPN_UCX_GSLOT_HELD);
  ck_assert_uint_eq(mpn_ucx_gslots_released_up_to(g, 3, MPN_SIDE_SEND), 5);
  /* The slot's next signal (5 + 4 with 4 slots per context), then late news of an older one. */
  take(g, 3, 9, MPN_SIDE_SEND, 79);
  take(g, 3, 1, MPN_SIDE_SEND, 80);
  mpn_ucx_gslots_released(g, 3, 1, MPN_SIDE_SEND);
  ck_assert_uint_eq(mpn_ucx_gslots_released_up_to(g, 3, MPN_SIDE_SEND), 5);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 9, MPN_SIDE_SEND, 0), MPN_UCX_GSLOT_HELD);
  mpn_ucx_gslots_released(g, 3, 9, MPN_SIDE_SEND);
  ck_assert_int_eq(mpn_ucx_gslots_state(g, 3, 9, MPN_SIDE_SEND, 0), MPN_UCX_GSLOT_FREE);
  mpn_ucx_gslots_destroy(g);
  ck_assert_int_eq(watched_gone, 1);
}
END_TEST

/* A graph destroyed after its communicator: the words stay for its news. */
START_TEST(outlive_communicator) {
  mpn_ucx_gslots_t* g = create_watched(4);
  for (uint32_t i = 0; i < 2; i++) take(g, i, i + 1, MPN_SIDE_RECV, 5);
  mpn_ucx_gslots_destroy(g);
  for (uint32_t i = 0; i < 2; i++) {
    ck_assert_int_eq(watched_gone, 0);
    mpn_ucx_gslots_released(g, i, i + 1, MPN_SIDE_RECV);
  }
  ck_assert_int_eq(watched_gone, 1);
}
END_TEST

/* A record that cannot be hung (here: the stream is not capturing) lets go
 * of the words at once and releases nothing. */
START_TEST(record_not_hung) {
  mpn_ucx_gslots_t* g = create_watched(4);
  mpn_graph_holds_t* h = NULL;
  for (uint32_t i = 2; i < 4; i++) mpn_ucx_gslots_take(g, &h, NULL, 0, i, i + 1, MPN_SIDE_SEND, 9);
  mpn_ucx_gslots_destroy(g);
  ck_assert_int_eq(watched_gone, 0);
  int current = 0;
  mpn_graph_holds_attach(h, 0, &current);
  ck_assert_int_eq(watched_gone, 1);
}
END_TEST

int main(void) {
  Suite* s = suite_create("ucx_gslots");
  TCase* tc = tcase_create("ucx_gslots");
  tcase_add_test(tc, free_once_released);
  tcase_add_test(tc, outlive_communicator);
  tcase_add_test(tc, record_not_hung);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
