/*
 * test_alloc_fail.c - what the library does when an allocation fails: the
 * call returns ncclSystemError with a message and leaks nothing it took.
 * The test is linked with --wrap for malloc, calloc and free (Makefile.am),
 * so the library's calls to them come here first; a chosen one fails.  No
 * GPU used, also where there is one.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bootstrap/bootstrap.h"
#include "core/comm.h"
#include "core/enqueue.h"
#include "core/group.h"
#include "core/param.h"
#include "core/topo.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "rma/rma.h"
#include "rma/window.h"
#include "run_suite.h"

void* __real_malloc(size_t size);
void* __real_calloc(size_t n, size_t size);
void __real_free(void* p);

/* The countdown-th malloc from now on fails (0: none); what the mallocs
 * since arming returned, and whether each was freed since. */
static int countdown;
static void* given[8];
static int ngiven, freed[8];

void* __wrap_malloc(size_t size) {
  if (countdown > 0 && --countdown == 0) return NULL;
  void* p = __real_malloc(size);
  if (countdown > 0 && ngiven < 8) given[ngiven++] = p;
  return p;
}

/* While set, a calloc of one object of this size fails. */
static size_t fail_calloc_of;
/* While set, the thread's next calloc of so many objects of so many bytes fails. */
static __thread size_t thread_fail_n, thread_fail_size;

void* __wrap_calloc(size_t n, size_t size) {
  if (fail_calloc_of && n == 1 && size == fail_calloc_of) return NULL;
  if (thread_fail_n && n == thread_fail_n && size == thread_fail_size) {
    thread_fail_n = 0;
    return NULL;
  }
  return __real_calloc(n, size);
}

void __wrap_free(void* p) {
  for (int i = 0; p && i < ngiven; i++)
    if (given[i] == p) freed[i] = 1;
  __real_free(p);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void arm(int nth) {
  ngiven = 0;
  memset(freed, 0, sizeof(freed));
  countdown = nth;
}

/* ncclWaitSignal copies its descriptors, then queues the operation: when
 * the queueing fails, the copy is freed too.  A group's first
 * MPN_GROUP_OPS_KEPT operations take no heap allocation, so the group
 * holds that many signals first; it then fails as a whole. */
START_TEST(wait_signal_queue_fails) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  ncclWaitSignalDesc_t d[3] = {{1, 0, 0, 0}, {1, 0, 0, 0}, {2, 0, 0, 0}};
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < MPN_GROUP_OPS_KEPT; i++) ck_assert_int_eq(ncclSignal(0, 0, 0, 0, comm, NULL), ncclSuccess);
  arm(2); /* the first malloc is the copy of the descriptors, the second the queued op */
  ck_assert_int_eq(ncclWaitSignal(3, d, comm, NULL), ncclSystemError);
  countdown = 0;
  ck_assert_int_eq(ngiven, 1);
  ck_assert_msg(freed[0], "ncclWaitSignal leaked its copy of the descriptors (%p)", given[0]);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "out of memory"));
  ck_assert_int_eq(ncclGroupEnd(), ncclSystemError);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* A group of more operations than a thread keeps (MPN_GROUP_OPS_KEPT)
 * takes the others from the heap and frees them at ncclGroupEnd, which
 * answers as for a group of one; the next group is served again. */
START_TEST(group_past_kept_ops) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  ncclResult_t alone = ncclSignal(0, 0, 0, 0, comm, NULL); /* (launched at once: a group of its own) */
  for (int round = 0; round < 2; round++) {
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < MPN_GROUP_OPS_KEPT; i++) ck_assert_int_eq(ncclSignal(0, 0, 0, 0, comm, NULL), ncclSuccess);
    ncclResult_t more[4], end;
    arm(1 << 30); /* none fails; the first 8 are recorded (no assertion meanwhile: the framework's own count) */
    for (int i = 0; i < 4; i++) more[i] = ncclSignal(0, 0, 0, 0, comm, NULL);
    int queued = ngiven;
    end = ncclGroupEnd();
    countdown = 0;
    for (int i = 0; i < 4; i++) ck_assert_int_eq(more[i], ncclSuccess);
    ck_assert_int_eq(queued, 4);
    ck_assert_int_eq(end, alone);
    for (int i = 0; i < queued; i++)
      ck_assert_msg(freed[i], "operation %d past the kept ones leaked (%p)", i, given[i]);
  }
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* The one-sided launch makes a communicator's one-sided state on its first
 * operation (a signal needs no window): when that fails, it returns
 * ncclSystemError instead of reading operations it had not listed yet.
 * Called directly (without a GPU the group's checks refuse before it). */
START_TEST(rma_state_fails_at_launch) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  ck_assert_ptr_null(comm->rma);
  mpn_op_t second = {.kind = MPN_OP_SIGNAL, .comm = comm, .peer = 0};
  mpn_op_t first = {.kind = MPN_OP_SIGNAL, .comm = comm, .peer = 0, .next = &second};
  fail_calloc_of = sizeof(mpn_rma_t);
  ncclResult_t res = mpn_rma_launch(&first, -1);
  fail_calloc_of = 0;
  ck_assert_int_eq(res, ncclSystemError);
  ck_assert_ptr_null(comm->rma);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* A rendezvous whose table cannot be made answers its callers with
 * ncclSystemError saying so, at once (an error needs no table), and its
 * unique id then serves a new round: the round ends, answered or not.
 * (Before, its full list stayed, and the next caller's hello was written
 * past its end; then it answered nobody, and the callers waited until
 * MPINCCL_BOOTSTRAP_TIMEOUT, 20 s here, for ncclTimeout.) */
START_TEST(rendezvous_table_fails) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = NULL;
  fail_calloc_of = mpn_bootstrap_table_bytes(1);
  double t0 = now_s();
  ncclResult_t first = ncclCommInitRank(&comm, 1, id, 0);
  double secs = now_s() - t0;
  fail_calloc_of = 0;
  ck_assert_msg(first == ncclSystemError && strstr(ncclGetLastError(NULL), "out of memory"), "%d \"%s\"", first,
                ncclGetLastError(NULL));
  ck_assert_msg(secs < 10, "the caller waited %.1f s", secs);
  ck_assert_ptr_null(comm);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_ptr_nonnull(comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  use_local_bootstrap(); /* (the timeout back to its default) */
}
END_TEST

/* One rank of a communicator of two in this process, on a thread of its
 * own (as processes would): what its call returned, how long it took, its
 * text.  fail_size: the call's first calloc of two objects of this size
 * fails (0: none). */
typedef struct {
  ncclUniqueId id;
  int rank;
  size_t fail_size;
  ncclComm_t comm, child;
  void* buf;
  ncclWindow_t win;
  ncclResult_t res;
  double secs;
  char text[512];
} rank_call_t;

static void call_begin(rank_call_t* r) {
  thread_fail_size = r->fail_size;
  thread_fail_n = r->fail_size ? 2 : 0;
  r->secs = now_s();
}

static void call_end(rank_call_t* r, ncclResult_t res) {
  r->secs = now_s() - r->secs;
  thread_fail_n = 0;
  r->res = res;
  snprintf(r->text, sizeof(r->text), "%s", ncclGetLastError(NULL));
}

static void* init_rank(void* v) {
  rank_call_t* r = v;
  call_begin(r);
  call_end(r, ncclCommInitRank(&r->comm, 2, r->id, r->rank));
  return NULL;
}

static void* split_rank(void* v) {
  rank_call_t* r = v;
  call_begin(r);
  call_end(r, ncclCommSplit(r->comm, 0, r->rank, &r->child, NULL));
  return NULL;
}

static void* register_rank(void* v) {
  rank_call_t* r = v;
  call_begin(r);
  call_end(r, ncclCommWindowRegister(r->comm, r->buf, NCCL_WIN_REQUIRED_ALIGNMENT, &r->win, 0));
  return NULL;
}

/* Runs fn for both ranks at once. */
static void both(rank_call_t r[2], void* (*fn)(void*)) {
  pthread_t t[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, fn, &r[i]), 0);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
}

/* A rank that fails before a set-up collective its peer joins tells the
 * peer, which stops at once with ncclRemoteError naming it and why, not at
 * the bootstrap's deadline (20 s here, the default 120 s) with ncclTimeout.
 * (The bound on the time is loose, for slow machines under valgrind.) */
static void expect_left(const rank_call_t r[2], ncclResult_t peer_res) {
  ck_assert_msg(r[0].res == ncclSystemError && strstr(r[0].text, "out of memory"), "rank 0: %d \"%s\"", r[0].res,
                r[0].text);
  ck_assert_msg(r[1].res == peer_res && strstr(r[1].text, "rank 0") && strstr(r[1].text, "out of memory"),
                "rank 1: %d \"%s\"", r[1].res, r[1].text);
  ck_assert_msg(r[1].secs < 15, "rank 1 waited %.2f s", r[1].secs);
}

START_TEST(init_fails_on_one_rank) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  rank_call_t r[2] = {{.rank = 0, .fail_size = sizeof(mpn_rank_info_t)}, {.rank = 1}};
  ck_assert_int_eq(ncclGetUniqueId(&r[0].id), ncclSuccess);
  r[1].id = r[0].id;
  both(r, init_rank);
  expect_left(r, ncclRemoteError);
  ck_assert_ptr_null(r[0].comm);
  ck_assert_ptr_null(r[1].comm);
  use_local_bootstrap();
}
END_TEST

/* Two ranks of one communicator, made by two threads (20 s deadline). */
static void pair_create(rank_call_t r[2]) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  r[0].rank = 0, r[1].rank = 1;
  ck_assert_int_eq(ncclGetUniqueId(&r[0].id), ncclSuccess);
  r[1].id = r[0].id;
  both(r, init_rank);
  ck_assert_int_eq(r[0].res, ncclSuccess);
  ck_assert_int_eq(r[1].res, ncclSuccess);
}

/* A split whose list of entries (one per rank: 12 bytes) cannot be made on
 * rank 0: rank 1 is told; the parent's set-up collectives are out of step
 * then, and its next window registration fails at once on both. */
START_TEST(split_fails_on_one_rank) {
  rank_call_t r[2] = {{.fail_size = 3 * sizeof(int)}, {.rank = 1}};
  pair_create(r);
  both(r, split_rank);
  expect_left(r, ncclRemoteError);
  ck_assert_ptr_null(r[0].child);
  ck_assert_ptr_null(r[1].child);
  void* page = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, NCCL_WIN_REQUIRED_ALIGNMENT);
  ck_assert_ptr_nonnull(page);
  r[0].buf = r[1].buf = page;
  r[0].fail_size = 0;
  both(r, register_rank);
  for (int i = 0; i < 2; i++)
    ck_assert_msg(strstr(r[i].text, "rank 0 left") != NULL, "rank %d: %d \"%s\"", i, r[i].res, r[i].text);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(r[i].comm), ncclSuccess);
  free(page);
  use_local_bootstrap();
}
END_TEST

START_TEST(window_register_fails_on_one_rank) {
  rank_call_t r[2] = {{.rank = 0}, {.rank = 1}};
  pair_create(r);
  void* page = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, NCCL_WIN_REQUIRED_ALIGNMENT);
  ck_assert_ptr_nonnull(page);
  r[0].buf = r[1].buf = page;
  r[0].fail_size = sizeof(mpn_win_part_t);
  both(r, register_rank);
  expect_left(r, ncclRemoteError);
  ck_assert_ptr_null(r[0].win);
  ck_assert_ptr_null(r[1].win);
  /* The communicator's set-up collectives are out of step: every later one
   * fails at once on both ranks, never pairing with a stale message. */
  r[0].fail_size = 0;
  both(r, register_rank);
  ck_assert_msg(r[0].res == ncclInvalidUsage && strstr(r[0].text, "rank 0 left"), "rank 0: %d \"%s\"", r[0].res,
                r[0].text);
  ck_assert_msg(r[1].res == ncclRemoteError && strstr(r[1].text, "rank 0 left"), "rank 1: %d \"%s\"", r[1].res,
                r[1].text);
  ck_assert_msg(r[0].secs < 15 && r[1].secs < 15, "%.2f s, %.2f s", r[0].secs, r[1].secs);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(r[i].comm), ncclSuccess);
  free(page);
  use_local_bootstrap();
}
END_TEST

int main(void) {
  /* No GPU, also on a machine that has one: the communicators are then
   * host-only, and no CUDA library allocates through the wrapped calls. */
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  Suite* s = suite_create("alloc_fail");
  TCase* tc = tcase_create("core");
  tcase_set_timeout(tc, 60); /* (a rank that waited out the bootstrap's 20 s fails on its result) */
  tcase_add_test(tc, wait_signal_queue_fails);
  tcase_add_test(tc, group_past_kept_ops);
  tcase_add_test(tc, rma_state_fails_at_launch);
  tcase_add_test(tc, rendezvous_table_fails);
  tcase_add_test(tc, init_fails_on_one_rank);
  tcase_add_test(tc, window_register_fails_on_one_rank);
  tcase_add_test(tc, split_fails_on_one_rank);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
