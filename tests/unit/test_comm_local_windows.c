/*
 * test_comm_local_windows.c - test_comm_local's tests of window registration
 * between ranks of this process: inside groups (blocking and non-blocking
 * creation), in a group refused on one rank, after a split, and aborted.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/param.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "test_comm_local.h"

/* Two ranks of one process (a 3 s bootstrap timeout) and one aligned page
 * of host memory for their window calls. */
static void* pair_and_page(ncclComm_t pair[2]) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "3");
  group_create(pair, 2);
  void* buf = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, NCCL_WIN_REQUIRED_ALIGNMENT);
  ck_assert_ptr_nonnull(buf);
  return buf;
}

/* One rank's group (a thread per rank, as processes would) fails on a bad
 * ncclSend; its queued window registration must still meet the peer's, as
 * a failure on both ranks.  Dropped, the peer's registration paired with
 * this rank's next one, and every later collective of the communicator was
 * out of step (the peer's next registration timed out). */
typedef struct {
  ncclComm_t comm;
  void* buf;
  int refuse; /* this rank's group also holds a send to a peer out of range */
  ncclResult_t group, again;
  char group_text[512];
  double again_s;
} refused_group_t;

static void* refused_group_rank(void* v) {
  refused_group_t* a = v;
  ncclWindow_t w = NULL;
  ncclGroupStart();
  ncclCommWindowRegister(a->comm, a->buf, NCCL_WIN_REQUIRED_ALIGNMENT, &w, 0);
  if (a->refuse) ncclSend(a->buf, 1, ncclInt8, 99, a->comm, NULL);
  a->group = ncclGroupEnd();
  snprintf(a->group_text, sizeof(a->group_text), "%s", ncclGetLastError(NULL));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  a->again = ncclCommWindowRegister(a->comm, a->buf, NCCL_WIN_REQUIRED_ALIGNMENT, &w, 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  a->again_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  return NULL;
}

START_TEST(window_in_refused_group) {
  ncclComm_t pair[2];
  void* buf = pair_and_page(pair);
  refused_group_t a[2] = {{.comm = pair[0], .buf = buf, .refuse = 1}, {.comm = pair[1], .buf = buf}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, refused_group_rank, &a[i]), 0);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
  ck_assert_int_eq(a[0].group, ncclInvalidArgument);
  ck_assert_msg(contains(a[0].group_text, "peer 99 out of range"), "rank 0: \"%s\"", a[0].group_text);
  ck_assert_int_ne(a[1].group, ncclSuccess); /* (its own refusal of host memory, or rank 0's) */
  /* Both ranks' next registrations meet each other (host memory: refused by both, at once). */
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(a[i].again != ncclTimeout && a[i].again != ncclSuccess && a[i].again_s < 2,
                  "rank %d: the next registration returned %d after %.2f s", i, a[i].again, a[i].again_s);
  }
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  free(buf);
}
END_TEST

/* A non-blocking split, then a window call on the parent (a thread per rank,
 * 100 rounds, outside a group and inside one): both are collectives over the
 * parent's bootstrap, and they take turns in call order.  Before, the
 * split's thread and the registration exchanged messages with the same
 * tags at once ("message from rank 1 has 12 bytes, expected 128": both
 * failed, in one of 60 rounds outside a group and nearly every one inside). */
typedef struct {
  ncclComm_t comm;
  int rank, in_group, rounds_ok;
  char text[512];
} split_window_t;

static void* split_window_rank(void* v) {
  split_window_t* a = v;
  static char buf[2][8192] __attribute__((aligned(4096)));
  for (int round = 0; round < 100; round++) {
    ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
    nb.blocking = 0;
    ncclComm_t child = NULL;
    ncclWindow_t w = NULL;
    if (a->in_group) ncclGroupStart();
    ncclResult_t split = ncclCommSplit(a->comm, 0, a->rank, &child, &nb);
    ncclResult_t win = ncclCommWindowRegister(a->comm, buf[a->rank], 4096, &w, 0);
    if (a->in_group) win = ncclGroupEnd();
    snprintf(a->text, sizeof(a->text), "%s", ncclGetLastError(NULL));
    ncclResult_t state = ncclInProgress;
    for (int spins = 0; child && state == ncclInProgress && spins < 500000; spins++) {
      ncclCommGetAsyncError(child, &state);
      usleep(10);
    }
    /* Host memory: the registration is refused by both ranks alike, never by the bootstrap. */
    int ok = (split == ncclSuccess || split == ncclInProgress) && win != ncclSuccess && state == ncclSuccess &&
             !contains(a->text, "bootstrap");
    if (child) ncclCommDestroy(child);
    if (!ok) return NULL;
    a->rounds_ok++;
  }
  return NULL;
}

START_TEST(split_then_window) {
  for (int in_group = 0; in_group < 2; in_group++) {
    use_local_bootstrap();
    set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "5");
    ncclComm_t pair[2];
    group_create(pair, 2);
    split_window_t a[2] = {{.comm = pair[0], .rank = 0, .in_group = in_group},
                           {.comm = pair[1], .rank = 1, .in_group = in_group}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, split_window_rank, &a[i]), 0);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 2; i++)
      ck_assert_msg(a[i].rounds_ok == 100, "%s a group: rank %d failed in round %d: \"%s\"",
                    in_group ? "in" : "outside", i, a[i].rounds_ok, a[i].text);
    for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  }
}
END_TEST

/* Window registration and deregistration inside a group, one thread
 * driving both ranks: queued (the handle stays NULL) and made at
 * ncclGroupEnd for both ranks at once.  Made at once, the first call waited
 * for the second rank, which this thread had not reached, and timed out.
 * The buffer is host memory, so every rank refuses it, together; a
 * communicator with a queued registration cannot be destroyed first. */
START_TEST(windows_in_group) {
  ncclComm_t pair[2];
  void* buf = pair_and_page(pair);
  ncclWindow_t win[2], bogus = (ncclWindow_t)buf;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) {
    win[i] = bogus;
    ck_assert_int_eq(ncclCommWindowRegister(pair[i], buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win[i], 0), ncclSuccess);
    ck_assert_ptr_null(win[i]);
  }
  ck_assert_int_eq(ncclCommDestroy(pair[0]), ncclInvalidUsage);
  /* Without a GPU the ranks have none; with one, buf is not device memory. */
  ncclResult_t res = ncclGroupEnd();
  const char* text = ncclGetLastError(NULL);
  ck_assert_msg((res == ncclInvalidUsage || res == ncclInvalidArgument) && contains(text, "ncclCommWindowRegister"),
                "ncclGroupEnd: %d, ncclGetLastError(NULL): \"%s\"", res, text);
  for (int i = 0; i < 2; i++) ck_assert_ptr_null(win[i]);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommWindowDeregister(pair[i], bogus), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
  text = ncclGetLastError(NULL);
  ck_assert_msg(contains(text, "is not a window of comm"), "ncclGetLastError(NULL): \"%s\"", text);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  /* Made and given windows in one group: the creations run first, so the
   * registrations find the communicators ready (and refuse host memory as
   * above, not a communicator still being created). */
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(ncclCommInitRank(&pair[i], 2, id, i), ncclSuccess);
    ck_assert_int_eq(ncclCommWindowRegister(pair[i], buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win[i], 0), ncclSuccess);
  }
  res = ncclGroupEnd();
  text = ncclGetLastError(NULL);
  ck_assert_msg((res == ncclInvalidUsage || res == ncclInvalidArgument) && contains(text, "ncclCommWindowRegister") &&
                    !contains(text, "being created"),
                "ncclGroupEnd: %d, ncclGetLastError(NULL): \"%s\"", res, text);
  for (int i = 0; i < 2; i++) {
    ck_assert_ptr_null(win[i]);
    ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  }
  free(buf);
}
END_TEST

/* ncclCommWindowDeregister of NULL succeeds at once, as NCCL's, and joins
 * no collective: rank 0 alone calls it, outside a group and in one, while
 * rank 1 calls nothing (it was refused after a collective that waited for
 * rank 1 until the bootstrap's timeout).  Then both ranks' next collective
 * still meets: a handle that is no window, refused by both. */
START_TEST(null_window_deregister) {
  ncclComm_t pair[2];
  void* buf = pair_and_page(pair);
  ck_assert_int_eq(ncclCommWindowDeregister(pair[0], NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowDeregister(pair[0], NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowDeregister(NULL, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "comm is NULL"));
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommWindowDeregister(pair[i], (ncclWindow_t)buf), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
  const char* text = ncclGetLastError(NULL);
  ck_assert_msg(contains(text, "is not a window of comm"), "ncclGetLastError(NULL): \"%s\"", text);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  free(buf);
}
END_TEST

/* A group whose window registration and whose operations are both refused
 * returns the registration's error (the window calls run first): its
 * ncclGetLastError text must be the registration's too.  It was the
 * operation's, refused after it ("ncclSend: comm ... has no CUDA device"
 * with the code of "ncclCommWindowRegister: size is 0"). */
START_TEST(window_error_text_in_group) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  static char buf[2 * NCCL_WIN_REQUIRED_ALIGNMENT] __attribute__((aligned(NCCL_WIN_REQUIRED_ALIGNMENT)));
  ncclWindow_t win = (ncclWindow_t)buf;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowRegister(comm, buf, 0, &win, 0), ncclSuccess);
  ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclRecv(buf + 1, 1, ncclInt8, 0, comm, NULL), ncclSuccess);
  ncclResult_t res = ncclGroupEnd();
  const char* text = ncclGetLastError(NULL);
  ck_assert_msg(res == ncclInvalidArgument && contains(text, "ncclCommWindowRegister: size is 0"),
                "ncclGroupEnd: %d, ncclGetLastError(NULL): \"%s\"", res, text);
  text = ncclGetLastError(comm);
  ck_assert_msg(contains(text, "ncclCommWindowRegister: size is 0"), "ncclGetLastError(comm): \"%s\"", text);
  ck_assert_ptr_null(win);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* What the non-blocking steps share: the local bootstrap (3 s timeout), a
 * non-blocking config, a unique id and a page for their window calls. */
static void* nonblocking_setup(ncclConfig_t* cfg, ncclUniqueId* id) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "3");
  *cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg->blocking = 0;
  void* buf = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, NCCL_WIN_REQUIRED_ALIGNMENT);
  ck_assert_ptr_nonnull(buf);
  ck_assert_int_eq(ncclGetUniqueId(id), ncclSuccess);
  return buf;
}

/* Polls comm until it answers something else than ncclInProgress (10 s at
 * most); returns that. */
static ncclResult_t settled(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  for (int k = 0; k < 10000 && state == ncclInProgress; k++) {
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &state), ncclSuccess);
    if (state == ncclInProgress) usleep(1000);
  }
  return state;
}

/* Communicators created non-blocking and given windows in one group: the
 * group returns ncclInProgress and its window calls go on in the
 * background, as NCCL's (they ran to their end in ncclGroupEnd).  The
 * registrations wait for their communicators' creation (each rank's is
 * bounded by the bootstrap's timeout), so every rank refuses the host
 * buffer alike.  They refused "still being created" instead, or, where
 * one rank's creation had ended first, one rank registered and waited
 * for a peer that had refused. */
START_TEST(windows_in_nonblocking_group) {
  ncclConfig_t cfg;
  ncclUniqueId id;
  ncclComm_t pair[2];
  ncclWindow_t win[2];
  void* buf = nonblocking_setup(&cfg, &id);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(ncclCommInitRankConfig(&pair[i], 2, id, i, &cfg), ncclSuccess);
    ck_assert_int_eq(ncclCommWindowRegister(pair[i], buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win[i], 0), ncclSuccess);
  }
  /* Non-blocking: the group's window calls go on in the background, and
   * each communicator says how its own ended. */
  ck_assert_int_eq(ncclGroupEnd(), ncclInProgress);
  for (int i = 0; i < 2; i++) {
    ncclResult_t state = settled(pair[i]);
    const char* text = ncclGetLastError(pair[i]);
    ck_assert_msg((state == ncclInvalidUsage || state == ncclInvalidArgument) &&
                      contains(text, "ncclCommWindowRegister") && !contains(text, "being created"),
                  "rank %d: %d, \"%s\"", i, state, text);
    ck_assert_ptr_null(win[i]);
  }
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  free(buf);
}
END_TEST

/* Two non-blocking ranks of one new communicator, made from this thread. */
static void nonblocking_pair(ncclComm_t pair[2], ncclConfig_t* cfg, ncclUniqueId id) {
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommInitRankConfig(&pair[i], 2, id, i, cfg), ncclSuccess);
  ncclResult_t made = ncclGroupEnd();
  ck_assert(made == ncclSuccess || made == ncclInProgress);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(settled(pair[i]), ncclSuccess);
}

/* Both non-blocking ranks register buf (host memory) outside a group, from
 * this thread: each call returns ncclInProgress, and both refuse the buffer
 * alike, with the call's text, never by the bootstrap's timeout. */
static void nonblocking_both_refuse(ncclComm_t pair[2], void* buf) {
  ncclWindow_t win[2];
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(ncclCommWindowRegister(pair[i], buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win[i], 0), ncclInProgress);
  for (int i = 0; i < 2; i++) {
    ncclResult_t state = settled(pair[i]);
    const char* text = ncclGetLastError(pair[i]);
    ck_assert_msg((state == ncclInvalidUsage || state == ncclInvalidArgument) &&
                      contains(text, "ncclCommWindowRegister") && !contains(text, "timed out") &&
                      !contains(text, "MPINCCL_BOOTSTRAP_TIMEOUT"),
                  "rank %d: async %d, ncclGetLastError: \"%s\"", i, state, text);
    ck_assert_ptr_null(win[i]);
  }
}

/* Non-blocking ranks driven by one thread, a group each, every group
 * failing on a bad ncclSend: each group's queued registration still joins
 * its peer's as a failure (mpn_win_jobs_refuse), and now in the background,
 * as in a group that did not fail: ncclGroupEnd returns the group's error
 * at once, rank 0's registration still waits for rank 1's (its
 * communicator answers ncclInProgress), and the two meet.  Made in
 * ncclGroupEnd, rank 0's waited there for rank 1's, which this thread had
 * not reached, until the bootstrap's timeout.  Nothing of it is the
 * communicators' asynchronous error (the groups returned theirs), and
 * their next registrations meet each other. */
START_TEST(window_in_refused_nonblocking_groups) {
  ncclConfig_t cfg;
  ncclUniqueId id;
  ncclComm_t pair[2];
  ncclWindow_t win[2];
  void* buf = nonblocking_setup(&cfg, &id);
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "5");
  nonblocking_pair(pair, &cfg, id);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclCommWindowRegister(pair[i], buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win[i], 0), ncclSuccess);
    ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, 99, pair[i], NULL), ncclInvalidArgument);
    ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
    const char* text = ncclGetLastError(NULL);
    ck_assert_msg(contains(text, "peer 99 out of range"), "rank %d: \"%s\"", i, text);
    ncclResult_t state = ncclSuccess;
    ck_assert_int_eq(ncclCommGetAsyncError(pair[0], &state), ncclSuccess);
    if (i == 0) /* (rank 1's registration is not made yet) */
      ck_assert_msg(state == ncclInProgress, "rank 0's registration was made in ncclGroupEnd: %d", state);
  }
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(settled(pair[i]), ncclSuccess);
    ck_assert_ptr_null(win[i]);
  }
  nonblocking_both_refuse(pair, buf);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  free(buf);
}
END_TEST

/* Non-blocking communicators' window calls outside a group, both ranks
 * driven by this one thread, NCCL's way: each call returns ncclInProgress
 * at once and goes on in the background, and ncclCommGetAsyncError answers
 * ncclInProgress until it is done, then its result: here both ranks refuse
 * the host buffer alike, with the call's text, and the handles stay NULL.
 * Made to the end in the call, the first registration waited for the
 * second rank's, which this thread had not made yet, until the bootstrap's
 * timeout. */
START_TEST(windows_nonblocking_one_thread) {
  ncclConfig_t cfg;
  ncclUniqueId id;
  ncclComm_t pair[2];
  void* buf = nonblocking_setup(&cfg, &id);
  nonblocking_pair(pair, &cfg, id);
  nonblocking_both_refuse(pair, buf);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(pair[i]), ncclSuccess);
  free(buf);
}
END_TEST

/* A window registration of one rank whose peer never registers, ended by
 * ncclCommAbort from another thread (NCCL's way out of a hung collective),
 * outside a group and inside one: the abort frees the communicator only
 * once the registration let go of it (it freed it under the waiting
 * allgather, which then read the freed communicator: valgrind "Invalid
 * read" in mpn_chan_recv). */
typedef struct {
  ncclComm_t comm;
  void* buf;
  int in_group;
  ncclResult_t res;
  int done;
} win_abort_t;

static void* window_register_thread(void* p) {
  win_abort_t* a = p;
  ncclWindow_t win = NULL;
  if (a->in_group) {
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclCommWindowRegister(a->comm, a->buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win, 0), ncclSuccess);
    a->res = ncclGroupEnd();
  } else {
    a->res = ncclCommWindowRegister(a->comm, a->buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win, 0);
  }
  __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

START_TEST(window_register_aborted) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "30");
  void* buf = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, NCCL_WIN_REQUIRED_ALIGNMENT);
  ck_assert_ptr_nonnull(buf);
  for (int in_group = 0; in_group < 2; in_group++) {
    ncclComm_t pair[2];
    group_create(pair, 2);
    win_abort_t a = {.comm = pair[0], .buf = buf, .in_group = in_group, .res = ncclSuccess};
    int idle = __atomic_load_n(&pair[0]->launches, __ATOMIC_ACQUIRE);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, window_register_thread, &a), 0);
    /* The registration holds the comm (a slow start, under a sanitizer on a
     * busy machine, let the abort come first and free it), then rank 0
     * waits in its allgather for rank 1. */
    for (int waited = 0; waited < 10000 && __atomic_load_n(&pair[0]->launches, __ATOMIC_ACQUIRE) == idle; waited++)
      usleep(1000);
    ck_assert_int_gt(__atomic_load_n(&pair[0]->launches, __ATOMIC_ACQUIRE), idle);
    usleep(200000);
    ck_assert_int_eq(ncclCommAbort(pair[0]), ncclSuccess);
    /* The abort returns once the registration let go of the comm (it waits
     * for its hold); the thread's return from the call follows, which a
     * thread slowed by a sanitizer on a busy machine may not have reached
     * yet.  A registration still waiting in its allgather would come back
     * only at the bootstrap's deadline (30 s here); a use of the freed comm
     * is what the sanitized and valgrind runs of this test catch. */
    for (int waited = 0; waited < 5000 && !__atomic_load_n(&a.done, __ATOMIC_ACQUIRE); waited++) usleep(1000);
    ck_assert_msg(__atomic_load_n(&a.done, __ATOMIC_ACQUIRE),
                  "in_group %d: the abort returned (and freed the comm) "
                  "while the registration still used it",
                  in_group);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(a.res, ncclRemoteError);
    ck_assert_int_eq(ncclCommAbort(pair[1]), ncclSuccess);
  }
  free(buf);
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
}
END_TEST

void comm_local_add_windows(TCase* tc) {
  tcase_add_test(tc, windows_in_group);
  tcase_add_test(tc, window_error_text_in_group);
  tcase_add_test(tc, null_window_deregister);
  tcase_add_test(tc, windows_nonblocking_one_thread);
  tcase_add_test(tc, window_in_refused_group);
  tcase_add_test(tc, split_then_window);
  tcase_add_test(tc, windows_in_nonblocking_group);
  tcase_add_test(tc, window_in_refused_nonblocking_groups);
  tcase_add_test(tc, window_register_aborted);
}
