/*
 * test_ucx_gnodes.c - the host-node state of one-sided calls over UCX
 * captured in CUDA graphs (src/ucx/gnodes.c): a gnode goes at a reclaim
 * only once its graphs are gone, the proxy holds none of its commands and
 * none failed; one whose record was not hung stays until the communicator
 * goes; a graph destroyed after its communicator: its gnode is kept whole
 * until the news, then freed.
 * The test plays CUDA's destructor thread (mpn_ucx_gnode_gone) and the
 * proxy (the count of commands in flight); free is watched (--wrap).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/comm.h"
#include "p2p/graphs.h"
#include "ucx/gnodes.h"
#include "ucx/winstage.h"
#include "ucx/orphans.h"
#include "run_suite.h"

void __real_free(void* p);
static void* watched[2]; /* blocks whose free the test waits for */
static int watched_gone[2];

void __wrap_free(void* p) {
  for (int i = 0; i < 2; i++)
    if (p != NULL && p == watched[i]) watched_gone[i] = 1;
  __real_free(p);
}

/* A gnode of n commands, no stage (no CUDA call), whose free (0) and whose
 * mark's (1) the test watches; its record's notes are dropped unhung (the
 * news comes from the test, as from CUDA's thread). */
static mpn_ucx_gnode_t* make_watched(int n) {
  mpn_ucx_gnode_t* g = NULL;
  ck_assert_int_eq(mpn_ucx_gnode_create(NULL, n, 0, &g), ncclSuccess);
  mpn_graph_holds_t* h = NULL;
  mpn_ucx_gnode_watch(g, &h, NULL, 0);
  ck_assert_ptr_nonnull(h);
  ck_assert_ptr_nonnull(g->gone);
  free(h);
  watched[0] = g, watched[1] = g->gone;
  watched_gone[0] = watched_gone[1] = 0;
  return g;
}

START_TEST(gone_and_done) {
  mpn_ucx_gnode_t *list = NULL, *g = make_watched(2);
  mpn_ucx_gnode_push(&list, g);
  __atomic_store_n(&g->pending, 2, __ATOMIC_RELEASE); /* a replay's commands in flight */
  mpn_ucx_gnode_reclaim(&list);
  ck_assert_int_eq(mpn_ucx_gnode_count(list), 1); /* its graph lives */
  mpn_ucx_gnode_gone(g->gone, 0, 1, 0);
  mpn_ucx_gnode_reclaim(&list);
  ck_assert_int_eq(mpn_ucx_gnode_count(list), 1); /* the proxy holds its commands */
  ck_assert_int_eq(watched_gone[0], 0);
  __atomic_store_n(&g->pending, 1, __ATOMIC_RELEASE);
  mpn_ucx_gnode_reclaim(&list);
  ck_assert_int_eq(mpn_ucx_gnode_count(list), 1);
  __atomic_store_n(&g->pending, 0, __ATOMIC_RELEASE);
  mpn_ucx_gnode_reclaim(&list);
  ck_assert_int_eq(mpn_ucx_gnode_count(list), 0);
  ck_assert_ptr_null(list);
  ck_assert_int_eq(watched_gone[0], 1);
  ck_assert_int_eq(watched_gone[1], 1); /* both holds of the mark went */
}
END_TEST

/* A later gnode's push frees the earlier ones that may go, and only those. */
START_TEST(push_reclaims) {
  mpn_ucx_gnode_t *list = NULL, *kept = NULL, *g = make_watched(1);
  ck_assert_int_eq(mpn_ucx_gnode_create(NULL, 1, 0, &kept), ncclSuccess); /* never watched */
  mpn_ucx_gnode_push(&list, kept);
  mpn_ucx_gnode_push(&list, g);
  mpn_ucx_gnode_gone(g->gone, 0, 1, 0);
  mpn_ucx_gnode_t* next = NULL;
  ck_assert_int_eq(mpn_ucx_gnode_create(NULL, 1, 0, &next), ncclSuccess);
  mpn_ucx_gnode_push(&list, next);
  ck_assert_int_eq(watched_gone[0], 1);
  ck_assert_int_eq(mpn_ucx_gnode_count(list), 2);
  ck_assert_ptr_eq(list, next);
  ck_assert_ptr_eq(list->next, kept);
  mpn_ucx_gnode_free_list(list, 0);
  free(kept), free(next); /* (not gone: left for late host nodes) */
}
END_TEST

/* A command failed: UCX may still read the stage, so it stays for the
 * communicator's free, which frees it (its graph is gone). */
START_TEST(failed_kept) {
  mpn_ucx_gnode_t *list = NULL, *g = make_watched(1);
  mpn_ucx_gnode_push(&list, g);
  __atomic_store_n(&g->error, (int)ncclRemoteError, __ATOMIC_RELEASE);
  mpn_ucx_gnode_gone(g->gone, 0, 1, 0);
  mpn_ucx_gnode_reclaim(&list);
  ck_assert_int_eq(mpn_ucx_gnode_count(list), 1);
  mpn_ucx_gnode_free_list(list, 0);
  ck_assert_int_eq(watched_gone[0], 1);
  ck_assert_int_eq(watched_gone[1], 1);
}
END_TEST

/* A graph destroyed after its communicator: the gnode is kept whole (a
 * replay queued before the destroy still copies into its stage), its host
 * node dead, and the news lets a later reap free it and its mark. */
START_TEST(outlive_communicator) {
  mpn_ucx_gnode_t *list = NULL, *g = make_watched(3);
  int before = mpn_ucx_orphans_count();
  mpn_ucx_gnode_push(&list, g);
  mpn_ucx_gnode_free_list(list, 0);
  ck_assert_int_eq(watched_gone[0], 0);
  ck_assert_ptr_nonnull(g->cmds);
  ck_assert_int_eq(g->guard.dead, 1);
  ck_assert_int_eq(mpn_ucx_orphans_count(), before + 1);
  ck_assert_int_eq(watched_gone[0], 0);
  mpn_ucx_gnode_gone(watched[1], 0, 1, 0);
  ck_assert_int_eq(watched_gone[1], 0); /* (the gnode's hold) */
  ck_assert_int_eq(mpn_ucx_orphans_count(), before);
  ck_assert_int_eq(watched_gone[0], 1);
  ck_assert_int_eq(watched_gone[1], 1);
}
END_TEST

/* A communicator's end marks its captured one-sided calls dead before its
 * UCX state goes (core/comm.c, comm_free_ucx), where a replay queued
 * behind the end may still run their host nodes.  The calls are listed by
 * the communicator itself: a kill that looked in the one-sided state's
 * list found nothing there. */
START_TEST(killed_at_communicator_end) {
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  ck_assert_ptr_nonnull(comm);
  mpn_ucx_gnode_t* g = make_watched(2);
  int before = mpn_ucx_orphans_count();
  mpn_ucx_rma_graph_keep(comm, g);
  ck_assert_int_eq(g->guard.dead, 0);
  mpn_ucx_rma_kill_graphs(comm);
  ck_assert_int_eq(g->guard.dead, 1);
  mpn_ucx_rma_free_graphs(comm, 0);
  ck_assert_ptr_null(comm->ucx_rma_graphs);
  ck_assert_int_eq(mpn_ucx_orphans_count(), before + 1); /* kept whole until its graphs are gone */
  mpn_ucx_gnode_gone(watched[1], 0, 1, 0);
  ck_assert_int_eq(mpn_ucx_orphans_count(), before);
  ck_assert_int_eq(watched_gone[0], 1);
  free(comm);
}
END_TEST

/* The same, where a command failed (UCX may still read the stage): not
 * kept whole but stripped, and left for a late host node. */
START_TEST(outlive_communicator_failed) {
  mpn_ucx_gnode_t *list = NULL, *g = make_watched(1);
  int before = mpn_ucx_orphans_count();
  mpn_ucx_gnode_push(&list, g);
  __atomic_store_n(&g->error, (int)ncclRemoteError, __ATOMIC_RELEASE);
  mpn_ucx_gnode_free_list(list, 0);
  ck_assert_int_eq(mpn_ucx_orphans_count(), before);
  ck_assert_ptr_null(g->cmds);
  mpn_ucx_gnode_gone(watched[1], 0, 1, 0);
  ck_assert_int_eq(watched_gone[1], 1);
  ck_assert_int_eq(watched_gone[0], 0);
  free(g);
}
END_TEST

/* A record that cannot be hung (here: the stream is not capturing) says
 * nothing is gone: the gnode stays until the communicator goes. */
START_TEST(record_not_hung) {
  mpn_ucx_gnode_t *list = NULL, *g = NULL;
  ck_assert_int_eq(mpn_ucx_gnode_create(NULL, 1, 0, &g), ncclSuccess);
  mpn_graph_holds_t* h = NULL;
  mpn_ucx_gnode_watch(g, &h, NULL, 0);
  watched[0] = g, watched[1] = g->gone;
  watched_gone[0] = watched_gone[1] = 0;
  mpn_ucx_gnode_push(&list, g);
  int current = 0;
  mpn_graph_holds_attach(h, 0, &current);
  mpn_ucx_gnode_reclaim(&list);
  ck_assert_int_eq(mpn_ucx_gnode_count(list), 1);
  ck_assert_int_eq(watched_gone[1], 0); /* the gnode's hold */
  mpn_ucx_gnode_free_list(list, 0);
  ck_assert_int_eq(watched_gone[1], 1);
  ck_assert_int_eq(watched_gone[0], 0);
  free(g);
}
END_TEST

int main(void) {
  Suite* s = suite_create("ucx_gnodes");
  TCase* tc = tcase_create("ucx_gnodes");
  tcase_add_test(tc, gone_and_done);
  tcase_add_test(tc, push_reclaims);
  tcase_add_test(tc, failed_kept);
  tcase_add_test(tc, outlive_communicator);
  tcase_add_test(tc, outlive_communicator_failed);
  tcase_add_test(tc, killed_at_communicator_end);
  tcase_add_test(tc, record_not_hung);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
