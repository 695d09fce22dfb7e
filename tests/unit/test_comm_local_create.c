/*
 * test_comm_local_create.c - test_comm_local's tests of creating and ending
 * communicators: queries and init arguments, the rendezvous (disagreements,
 * timeout), a thread per rank and one thread in a group, split, non-blocking
 * creation, abort and destroy (pending, in a group, an address reused), and
 * an error found right after a creation succeeded.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "test_comm_local.h"

START_TEST(one_rank_queries) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  int n = -1, r = -1, dev = -7;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
  ck_assert_int_eq(ncclCommUserRank(comm, &r), ncclSuccess);
  ck_assert_int_eq(ncclCommCuDevice(comm, &dev), ncclSuccess);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(r, 0);
  ck_assert_int_ge(dev, -1);
  ncclResult_t async = ncclInternalError;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSuccess);
  ck_assert_int_eq(comm->transport[0], 0 /* self */);
  ck_assert_int_eq(ncclCommCount(comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "count is NULL"));
  ck_assert_int_eq(ncclCommFinalize(comm), ncclSuccess);
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess); /* a query still answers */
  ck_assert_int_eq(ncclSend(&n, 1, ncclInt32, 0, comm, NULL), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(comm), "finalized"));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  /* A destroyed handle is refused, not dereferenced. */
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "not a live communicator"));
  ck_assert_int_eq(ncclCommDestroy(NULL), ncclSuccess);
}
END_TEST

START_TEST(init_arguments) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "nranks 0"));
  ck_assert_int_eq(ncclCommInitRank(&comm, 1 << 30, id, 0), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "nranks 1073741824 above the most"));
  ck_assert_int_eq(ncclCommInitRank(&comm, 4, id, 4), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "rank 4 out of range [0, 4)"));
  ncclUniqueId junk;
  memset(&junk, 0x11, sizeof(junk));
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, junk, 0), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "ncclGetUniqueId"));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "magic"));
  ck_assert_int_eq(ncclCommInitAll(NULL, 1, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "ncclCommInitAll: comms is NULL"));
  ck_assert_int_eq(ncclCommInitAll(NULL, 0, NULL), ncclInvalidArgument); /* comms is checked first */
  int bad_list[2] = {4096, 0};
  ncclComm_t comms[2] = {(ncclComm_t)&junk, (ncclComm_t)&junk};
  ck_assert_int_eq(ncclCommInitAll(comms, -1, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "ncclCommInitAll: ndev -1 is negative"));
  /* No devices: nothing is created, comms is left alone, and it succeeds (NCCL's init.cc). */
  ck_assert_int_eq(ncclCommInitAll(comms, 0, NULL), ncclSuccess);
  ck_assert_int_eq(ncclCommInitAll(comms, 0, bad_list), ncclSuccess);
  ck_assert_ptr_eq(comms[0], (ncclComm_t)&junk);
  ck_assert_int_eq(ncclCommInitAll(comms, 2, bad_list), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "devlist[0] = 4096"));
}
END_TEST

/* Two callers giving the same rank, and callers disagreeing on nranks. */
typedef struct {
  ncclUniqueId id;
  int nranks, rank;
  unsigned delay_us;    /* before the call */
  ncclConfig_t* config; /* given to ncclCommInitRankConfig when not NULL */
  ncclComm_t comm;
  ncclResult_t res;
  char error[256];
} rank_arg_t;

static void* init_rank_thread(void* p) {
  rank_arg_t* a = p;
  if (a->delay_us) usleep(a->delay_us);
  a->res = a->config ? ncclCommInitRankConfig(&a->comm, a->nranks, a->id, a->rank, a->config)
                     : ncclCommInitRank(&a->comm, a->nranks, a->id, a->rank);
  snprintf(a->error, sizeof(a->error), "%s", ncclGetLastError(NULL));
  return NULL;
}

static void run_ranks(rank_arg_t* args, int n) {
  pthread_t t[MAXR];
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, init_rank_thread, &args[i]);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

START_TEST(rendezvous_disagreements) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  rank_arg_t a[2] = {{.nranks = 2, .rank = 1}, {.nranks = 2, .rank = 1}};
  ck_assert_int_eq(ncclGetUniqueId(&a[0].id), ncclSuccess);
  a[1].id = a[0].id;
  run_ranks(a, 2);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(a[i].res, ncclInvalidArgument);
    ck_assert_ptr_null(a[i].comm);
    ck_assert(contains(a[i].error, "rank 1 was given by two callers"));
  }
  rank_arg_t b[2] = {{.nranks = 2, .rank = 0}, {.nranks = 3, .rank = 1}};
  ck_assert_int_eq(ncclGetUniqueId(&b[0].id), ncclSuccess);
  b[1].id = b[0].id;
  run_ranks(b, 2);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(b[i].res, ncclInvalidArgument);
    ck_assert(contains(b[i].error, "disagree on nranks"));
  }
  /* A rank given twice fills the round before the last rank comes: that one
   * gets the error too (it used to wait out the timeout).  The failed id
   * answers late callers for an hour (MPINCCL_BOOTSTRAP_LINGER), not 2 s,
   * which a machine that stalls for seconds can exceed before the last
   * rank comes (then that rank starts a new round and times out). */
  set_param("MPINCCL_BOOTSTRAP_LINGER", "3600");
  rank_arg_t c[4] = {{.nranks = 3, .rank = 0},
                     {.nranks = 3, .rank = 0},
                     {.nranks = 3, .rank = 1},
                     {.nranks = 3, .rank = 2, .delay_us = 300000}};
  ck_assert_int_eq(ncclGetUniqueId(&c[0].id), ncclSuccess);
  for (int i = 1; i < 4; i++) c[i].id = c[0].id;
  run_ranks(c, 4);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(c[i].res, ncclInvalidArgument);
    ck_assert(contains(c[i].error, "rank 0 was given by two callers"));
  }
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
}
END_TEST

/* A rank refused before it joins the rendezvous (a config of the wrong
 * magic) tells it: the other ranks, one waiting and one coming after the
 * refusal, get ncclRemoteError naming it and its reason, not ncclTimeout at
 * the deadline (20 s here); the id serves all of them again later. */
START_TEST(rendezvous_rank_refused) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0x1234;
  rank_arg_t a[3] = {{.nranks = 3, .rank = 0},
                     {.nranks = 3, .rank = 1, .delay_us = 200000, .config = &bad},
                     {.nranks = 3, .rank = 2, .delay_us = 400000}};
  ck_assert_int_eq(ncclGetUniqueId(&a[0].id), ncclSuccess);
  a[1].id = a[2].id = a[0].id;
  run_ranks(a, 3);
  ck_assert_int_eq(a[1].res, ncclInvalidArgument);
  ck_assert_msg(contains(a[1].error, "magic"), "rank 1: \"%s\"", a[1].error);
  for (int i = 0; i < 3; i += 2) {
    ck_assert_msg(a[i].res == ncclRemoteError && contains(a[i].error, "rank 1 failed before it could join") &&
                      contains(a[i].error, "magic"),
                  "rank %d: %d \"%s\"", i, a[i].res, a[i].error);
    ck_assert_ptr_null(a[i].comm);
  }
  /* All three again with the same id, once MPINCCL_BOOTSTRAP_LINGER (2 s)
   * passed since the last caller: a new round, which succeeds. */
  usleep(2500000);
  a[1].config = NULL;
  run_ranks(a, 3);
  for (int i = 0; i < 3; i++) ck_assert_msg(a[i].res == ncclSuccess, "rank %d: %d \"%s\"", i, a[i].res, a[i].error);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(ncclCommDestroy(a[i].comm), ncclSuccess);
}
END_TEST

/* A rank whose peers never come: ncclTimeout with a message, not a hang. */
START_TEST(rendezvous_timeout) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "1");
  ncclUniqueId id;
  ncclComm_t comm = (ncclComm_t)0x1;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 2, id, 0), ncclTimeout);
  ck_assert_ptr_null(comm);
  ck_assert(contains(ncclGetLastError(NULL), "MPINCCL_BOOTSTRAP_TIMEOUT"));
}
END_TEST

START_TEST(threads_one_rank_each) {
  use_local_bootstrap();
  rank_arg_t a[4];
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  for (int i = 0; i < 4; i++) a[i] = (rank_arg_t){.id = id, .nranks = 4, .rank = i};
  run_ranks(a, 4);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(a[i].res, ncclSuccess);
    int n, r;
    ck_assert_int_eq(ncclCommCount(a[i].comm, &n), ncclSuccess);
    ck_assert_int_eq(ncclCommUserRank(a[i].comm, &r), ncclSuccess);
    ck_assert_int_eq(n, 4);
    ck_assert_int_eq(r, i);
    ck_assert_int_eq(a[i].comm->topo.n_same_process, 4);
    for (int p = 0; p < 4; p++) ck_assert_int_eq(a[i].comm->transport[p], p == i ? 0 /* self */ : 1 /* local */);
  }
  for (int i = 0; i < 4; i++) ck_assert_int_eq(ncclCommDestroy(a[i].comm), ncclSuccess);
}
END_TEST

/* One thread creating several ranks inside a group (as NCCL programs do). */
void group_create(ncclComm_t* comms, int n) {
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < n; i++) ck_assert_int_eq(ncclCommInitRank(&comms[i], n, id, i), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
}

START_TEST(group_creates_several_ranks) {
  use_local_bootstrap();
  ncclComm_t comms[3];
  group_create(comms, 3);
  for (int i = 0; i < 3; i++) {
    int r;
    ck_assert_int_eq(ncclCommUserRank(comms[i], &r), ncclSuccess);
    ck_assert_int_eq(r, i);
    ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
  }
}
END_TEST

/* Split with colors, reversed keys and NCCL_SPLIT_NOCOLOR, driven by one thread. */
START_TEST(split_in_group) {
  use_local_bootstrap();
  enum { N = 6 };
  ncclComm_t comms[N], sub[N];
  group_create(comms, N);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    int color = i == 5 ? NCCL_SPLIT_NOCOLOR : i % 2;
    ck_assert_int_eq(ncclCommSplit(comms[i], color, N - i, &sub[i], NULL), ncclSuccess);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert_ptr_null(sub[5]);
  /* even: ranks 0,2,4 with keys 6,4,2 -> new ranks 2,1,0; odd: 1,3 -> 1,0 */
  int expect_rank[5] = {2, 1, 1, 0, 0}, expect_n[5] = {3, 2, 3, 2, 3};
  for (int i = 0; i < 5; i++) {
    int n, r;
    ck_assert_int_eq(ncclCommCount(sub[i], &n), ncclSuccess);
    ck_assert_int_eq(ncclCommUserRank(sub[i], &r), ncclSuccess);
    ck_assert_int_eq(n, expect_n[i]);
    ck_assert_int_eq(r, expect_rank[i]);
  }
  /* The children work on their own: a barrier over each. */
  ck_assert_int_eq(ncclCommSplit(comms[0], -5, 0, &sub[0], NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "color -5"));
  for (int i = 0; i < 5; i++) ck_assert_int_eq(ncclCommDestroy(sub[i]), ncclSuccess);
  /* Blocking parents, every split given one non-blocking config, the one
   * without color too: no mix of modes (its mode is its config's, as in
   * NCCL, not its parent's), so the group runs in the background. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(ncclCommSplit(comms[i], i == 5 ? NCCL_SPLIT_NOCOLOR : 0, i, &sub[i], &cfg), ncclSuccess);
  ck_assert_msg(ncclGroupEnd() == ncclInProgress, "%s", ncclGetLastError(NULL));
  ck_assert_ptr_null(sub[5]);
  for (int i = 0; i < 5; i++) {
    ncclResult_t state;
    do {
      ck_assert_int_eq(ncclCommGetAsyncError(sub[i], &state), ncclSuccess);
    } while (state == ncclInProgress);
    ck_assert_int_eq(state, ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(sub[i]), ncclSuccess);
  }
  for (int i = 0; i < N; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
}
END_TEST

/* config.blocking = 0: ncclInProgress, then ncclSuccess through the async error. */
START_TEST(nonblocking_creation) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comms[2];
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  /* Rank 0 alone cannot finish: it must report progress, not block. */
  ck_assert_int_eq(ncclCommInitRankConfig(&comms[0], 2, id, 0, &cfg), ncclInProgress);
  ncclResult_t state;
  ck_assert_int_eq(ncclCommGetAsyncError(comms[0], &state), ncclSuccess);
  ck_assert_int_eq(state, ncclInProgress);
  int n;
  ck_assert_int_eq(ncclCommCount(comms[0], &n), ncclInvalidArgument); /* (as NCCL) */
  ck_assert(contains(ncclGetLastError(comms[0]), "still being created"));
  ck_assert_int_eq(ncclCommInitRankConfig(&comms[1], 2, id, 1, &cfg), ncclInProgress);
  for (int i = 0; i < 2; i++) {
    do {
      ck_assert_int_eq(ncclCommGetAsyncError(comms[i], &state), ncclSuccess);
    } while (state == ncclInProgress);
    ck_assert_int_eq(state, ncclSuccess);
    ck_assert_int_eq(ncclCommCount(comms[i], &n), ncclSuccess);
    ck_assert_int_eq(n, 2);
  }
  /* Non-blocking split in a group: ncclGroupEnd returns ncclInProgress. */
  ncclComm_t sub[2];
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommSplit(comms[i], 0, i, &sub[i], NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclInProgress);
  for (int i = 0; i < 2; i++) {
    do {
      ck_assert_int_eq(ncclCommGetAsyncError(sub[i], &state), ncclSuccess);
    } while (state == ncclInProgress);
    ck_assert_int_eq(state, ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(sub[i]), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
  }
}
END_TEST

/* Abort stops a creation that waits for absent peers, promptly. */
START_TEST(abort_pending_creation) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 3, id, 0, &cfg), ncclInProgress);
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
  int n;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclInvalidArgument);
}
END_TEST

/* A blocking creation that waits for absent peers, on a thread of its own;
 * its handle is set from the call on. */
typedef struct {
  ncclUniqueId id;
  ncclComm_t comm; /* (read by the other thread: atomic) */
  ncclResult_t res;
  int ended;
} blocking_create_t;

static void* blocking_create(void* arg) {
  blocking_create_t* b = arg;
  b->res = ncclCommInitRank(&b->comm, 3, b->id, 0);
  __atomic_store_n(&b->ended, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Another thread's abort (abort 1, 2: without waiting) or destroy (0) of a
 * comm whose blocking creation still runs stops the creation and frees the
 * comm once, after it: the creation fails, its handle goes back to NULL.
 * The comm was freed under the running creation and then again by it (a
 * double free, or a creation thread waiting for good on a freed lock; on
 * the GPU machine, an abort that came while the creation started the
 * device's context, before it held the comm, freed it from under it). */
static void end_blocking_creation(int abort) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "60");
  blocking_create_t b = {.res = ncclSuccess};
  ck_assert_int_eq(ncclGetUniqueId(&b.id), ncclSuccess);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, blocking_create, &b), 0);
  ncclComm_t comm = NULL;
  while ((comm = __atomic_load_n(&b.comm, __ATOMIC_ACQUIRE)) == NULL && !__atomic_load_n(&b.ended, __ATOMIC_ACQUIRE))
    usleep(100);
  ck_assert_ptr_nonnull(comm);
  usleep(abort == 2 ? 0 : 100000); /* the creation waits at the rendezvous (2: it may not have started) */
  ck_assert_int_eq(abort ? ncclCommAbort(comm) : ncclCommDestroy(comm), ncclSuccess);
  pthread_join(t, NULL);
  ck_assert_int_ne(b.res, ncclSuccess);
  ck_assert_int_ne(b.res, ncclTimeout); /* stopped, not timed out */
  ck_assert_ptr_null(b.comm);
  int n;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclInvalidArgument);
}

START_TEST(abort_blocking_creation) { end_blocking_creation(1); }
END_TEST

START_TEST(destroy_blocking_creation) { end_blocking_creation(0); }
END_TEST

/* The abort at once, as the handle is set: with a GPU the creation may
 * still be starting the device's context, before its job runs. */
START_TEST(abort_starting_creation) { end_blocking_creation(2); }
END_TEST

static double seconds_since(const struct timespec* t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* A rank that aborts its pending creation takes its hello back, or, where
 * the abort comes before it (a GPU's first context takes long), never
 * joins and tells the rendezvous: either way its peers, one waiting and one
 * coming later, get ncclRemoteError naming it at once, not a table that
 * names it and then ncclTimeout in the first collective (20 s here). */
START_TEST(abort_pending_creation_tells_peers) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  set_param("MPINCCL_BOOTSTRAP_LINGER", "3600"); /* rank 2 comes to a failed id, however late */
  rank_arg_t a[2] = {{.nranks = 3, .rank = 0}, {.nranks = 3, .rank = 2, .delay_us = 400000}};
  ck_assert_int_eq(ncclGetUniqueId(&a[0].id), ncclSuccess);
  a[1].id = a[0].id;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* Rank 1 first: on a GPU machine the call starts CUDA, which takes long
   * (the others' creation completed meanwhile, before the abort). */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm;
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 3, a[0].id, 1, &cfg), ncclInProgress);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, init_rank_thread, &a[i]);
  usleep(200000); /* rank 1's hello is in (or comes after the abort); rank 2's not yet */
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    ck_assert_msg(a[i].res == ncclRemoteError &&
                      (contains(a[i].error, "rank 1 left before the rendezvous was complete") ||
                       contains(a[i].error, "rank 1 failed before it could join")) &&
                      contains(a[i].error, "aborted"),
                  "rank %d: %d \"%s\"", a[i].rank, a[i].res, a[i].error);
    ck_assert_ptr_null(a[i].comm);
  }
  ck_assert_double_lt(seconds_since(&t0), 15);
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
}
END_TEST

/* A rank whose wait for the rendezvous timed out takes its hello back too:
 * a peer that comes later gets ncclRemoteError naming it, where it used to
 * complete the round with it and wait for it in the first collective. */
START_TEST(rendezvous_timeout_withdraws) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "1");
  set_param("MPINCCL_BOOTSTRAP_LINGER", "3600");
  /* (3 s late: rank 0's deadline counts from after its device is set, which
   * took over 0.5 s on the GPU machine under make check) */
  rank_arg_t a[2] = {{.nranks = 2, .rank = 0}, {.nranks = 2, .rank = 1, .delay_us = 3000000}};
  ck_assert_int_eq(ncclGetUniqueId(&a[0].id), ncclSuccess);
  a[1].id = a[0].id;
  run_ranks(a, 2);
  ck_assert_msg(a[0].res == ncclTimeout && contains(a[0].error, "MPINCCL_BOOTSTRAP_TIMEOUT"), "rank 0: %d \"%s\"",
                a[0].res, a[0].error);
  ck_assert_msg(a[1].res == ncclRemoteError && contains(a[1].error, "rank 0 left before the rendezvous was complete") &&
                    contains(a[1].error, "MPINCCL_BOOTSTRAP_TIMEOUT"),
                "rank 1: %d \"%s\"", a[1].res, a[1].error);
  ck_assert_ptr_null(a[1].comm);
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
}
END_TEST

/* A destroy waiting for a creation that cannot finish, and an abort of
 * another thread meant to end it: the abort ends the wait and returns, the
 * destroy frees the communicator once (both used to join the creation
 * thread and free comm: a hang in pthread_join, or a double free). */
static void* destroy_thread(void* p) {
  ncclComm_t comm = p;
  return (void*)(intptr_t)ncclCommDestroy(comm);
}

START_TEST(abort_during_destroy) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "30");
  ncclUniqueId id;
  ncclComm_t comm;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 2, id, 0, &cfg), ncclInProgress); /* rank 1 never comes */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, destroy_thread, comm), 0);
  usleep(200000); /* the destroy waits for the creation */
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
  void* ret = NULL;
  ck_assert_int_eq(pthread_join(t, &ret), 0);
  ck_assert_int_eq((ncclResult_t)(intptr_t)ret, ncclSuccess);
  int n;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclInvalidArgument); /* gone */
  ck_assert_int_eq(ncclCommDestroy(comm), ncclInvalidArgument);
  /* A second destroy while the first one waits is refused. */
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 2, id, 0, &cfg), ncclInProgress);
  ck_assert_int_eq(pthread_create(&t, NULL, destroy_thread, comm), 0);
  usleep(200000);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(NULL), "being destroyed or aborted by another thread"));
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
  ck_assert_int_eq(pthread_join(t, &ret), 0);
  ck_assert_int_eq((ncclResult_t)(intptr_t)ret, ncclSuccess);
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
}
END_TEST

/* A communicator that the caller's open group makes or splits is refused
 * by destroy and abort until ncclGroupEnd ran the job (desk review of the
 * twenty-fourth session: they freed it, and ncclGroupEnd then used it). */
START_TEST(destroy_in_group) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comm = NULL, sub = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(NULL), "call ncclGroupEnd first"));
  ck_assert_int_eq(ncclCommAbort(comm), ncclInvalidUsage);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  int n = 0;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &sub, NULL), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclInvalidUsage);
  ncclComm_t second = NULL; /* a second split of comm in the group is refused, the first goes on */
  ck_assert_int_eq(ncclCommSplit(comm, 1, 0, &second, NULL), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(comm), "split, or given a window call, already in this group"));
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage); /* the group's first error: nothing runs */
  ck_assert_ptr_null(sub);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &sub, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert_int_eq(ncclCommCount(sub, &n), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess); /* the parent first: the child stands alone */
  ck_assert_int_eq(ncclCommDestroy(sub), ncclSuccess);
}
END_TEST

/* A communicator destroyed while the caller's open group holds an
 * operation of it: ncclGroupEnd refuses the group (nothing of it was
 * posted), even when a communicator made meanwhile got the same address
 * (desk review: the launch took the new one for the old and posted the
 * operation on it, a message its peer never expects). */
START_TEST(destroyed_comm_address_reused) {
  use_local_bootstrap();
  int reused = 0;
  for (int attempt = 0; attempt < 8 && !reused; attempt++) {
    ncclComm_t old = comm_of_one(), made = NULL;
    char buf[16];
    ncclUniqueId id;
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, 0, old, NULL), ncclSuccess);
    ck_assert_int_eq(ncclCommDestroy(old), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRank(&made, 1, id, 0), ncclSuccess); /* allocated now, run by ncclGroupEnd */
    reused = made == old;
    ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
    ck_assert(contains(ncclGetLastError(NULL), "was destroyed or aborted after its operations were enqueued"));
    int n = 0;
    ck_assert_int_eq(ncclCommCount(made, &n), ncclSuccess); /* the creation ran */
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ncclCommDestroy(made), ncclSuccess);
  }
  /* (valgrind's and AddressSanitizer's allocators hold freed blocks back:
   * never reached there) */
  const char* preload = getenv("LD_PRELOAD");
  int held_back = preload && strstr(preload, "vgpreload");
#ifdef __SANITIZE_ADDRESS__
  held_back = 1;
#endif
  ck_assert_msg(reused || held_back, "no communicator got a destroyed one's address: the case was not reached");
}
END_TEST

ncclResult_t __real_mpn_bootstrap_barrier(mpn_bootstrap_t* b);

/* While set, where the handle of a creation to mark lies, and its rank. */
static ncclComm_t* watched;
static int watched_rank;

/* The creation's last collective (linked with --wrap, Makefile.am): once it
 * passed, the watched rank's communicator is marked as the watchdog marks
 * one whose peer it found gone (watchdog.c). */
ncclResult_t __wrap_mpn_bootstrap_barrier(mpn_bootstrap_t* b) {
  ncclResult_t res = __real_mpn_bootstrap_barrier(b);
  ncclComm_t comm = watched ? __atomic_load_n(watched, __ATOMIC_ACQUIRE) : NULL;
  if (res == ncclSuccess && comm && b->rank == watched_rank) {
    mpn_comm_set_broken(comm, ncclRemoteError, "rank %d: peer 1 is gone (made up by the test)", b->rank);
  }
  return res;
}

/* The comm reports what the watchdog found, and the caller can abort it. */
static void check_reported(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclRemoteError);
  ck_assert(contains(ncclGetLastError(comm), "made up by the test"));
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
}

/* A blocking creation that succeeded, its comm reporting an error at once
 * (a peer gone right after): the caller keeps the comm and learns the
 * error from it.  ncclCommInitRank returned ncclSuccess with the handle set
 * back to NULL and the comm freed (desk review: the creation was judged by
 * the comm's asynchronous error, not by its own result). */
START_TEST(error_after_inline_creation) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  watched = &comm;
  watched_rank = 0;
  ncclResult_t res = ncclCommInitRank(&comm, 1, id, 0);
  watched = NULL;
  ck_assert_int_eq(res, ncclSuccess);
  ck_assert_msg(comm != NULL, "ncclCommInitRank returned ncclSuccess and a NULL communicator");
  check_reported(comm);
}
END_TEST

/* The same for two ranks one thread creates in a group (each on a creation
 * thread): ncclGroupEnd returned ncclSuccess with rank 0's handle NULL. */
START_TEST(error_after_group_creation) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comms[2] = {NULL, NULL};
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  watched = &comms[0];
  watched_rank = 0;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) ck_assert_int_eq(ncclCommInitRank(&comms[r], 2, id, r), ncclSuccess);
  ncclResult_t res = ncclGroupEnd();
  watched = NULL;
  ck_assert_int_eq(res, ncclSuccess);
  ck_assert_msg(comms[0] != NULL && comms[1] != NULL, "ncclGroupEnd returned ncclSuccess and handles %p, %p",
                (void*)comms[0], (void*)comms[1]);
  ncclResult_t async = ncclInProgress;
  ck_assert_int_eq(ncclCommGetAsyncError(comms[1], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSuccess);
  check_reported(comms[0]);
  ck_assert_int_eq(ncclCommDestroy(comms[1]), ncclSuccess);
}
END_TEST

int __real_pthread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*), void* arg);

/* While above 0 on a thread, its next starts of threads without attributes
 * (creation threads; the library's detached helpers pass attributes) fail
 * (linked with --wrap, Makefile.am). */
static __thread int thread_starts_to_fail;

int __wrap_pthread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  if (attr == NULL && thread_starts_to_fail > 0) {
    thread_starts_to_fail--;
    return EAGAIN;
  }
  return __real_pthread_create(t, attr, fn, arg);
}

/* The peer rank of a creation whose threads could not start fails at once
 * with ncclRemoteError naming the reason; it waited for the ranks that
 * never came until MPINCCL_BOOTSTRAP_TIMEOUT (20 s here), then returned
 * ncclTimeout (desk review: the rendezvous was never told). */
static void check_peer_told(pthread_t t, rank_arg_t* peer) {
  pthread_join(t, NULL);
  ck_assert_msg(peer->res == ncclRemoteError && contains(peer->error, "cannot start a creation thread"),
                "rank %d: %d \"%s\"", peer->rank, peer->res, peer->error);
  ck_assert_ptr_null(peer->comm);
}

/* A group creating two ranks of three whose first creation thread cannot
 * start: ncclGroupEnd returns ncclSystemError with that reason (not the
 * text of a job stopped because of it), both handles NULL. */
START_TEST(group_creation_thread_not_started) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  set_param("MPINCCL_BOOTSTRAP_LINGER", "3600"); /* a late peer still gets the failed round's answer */
  rank_arg_t peer = {.nranks = 3, .rank = 2};
  ck_assert_int_eq(ncclGetUniqueId(&peer.id), ncclSuccess);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, init_rank_thread, &peer), 0);
  ncclComm_t comms[2] = {NULL, NULL};
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) ck_assert_int_eq(ncclCommInitRank(&comms[r], 3, peer.id, r), ncclSuccess);
  thread_starts_to_fail = 1;
  ncclResult_t res = ncclGroupEnd();
  thread_starts_to_fail = 0;
  ck_assert_int_eq(res, ncclSystemError);
  ck_assert_msg(contains(ncclGetLastError(NULL), "cannot start a creation thread"), "\"%s\"", ncclGetLastError(NULL));
  ck_assert_ptr_null(comms[0]);
  ck_assert_ptr_null(comms[1]);
  check_peer_told(t, &peer);
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
}
END_TEST

/* The same for a non-blocking creation: the call returns ncclSystemError,
 * its communicator reports it and can be destroyed. */
START_TEST(nonblocking_creation_thread_not_started) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "20");
  set_param("MPINCCL_BOOTSTRAP_LINGER", "3600");
  rank_arg_t peer = {.nranks = 2, .rank = 1};
  ck_assert_int_eq(ncclGetUniqueId(&peer.id), ncclSuccess);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, init_rank_thread, &peer), 0);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  thread_starts_to_fail = 1;
  ncclResult_t res = ncclCommInitRankConfig(&comm, 2, peer.id, 0, &cfg);
  thread_starts_to_fail = 0;
  ck_assert_int_eq(res, ncclSystemError);
  ck_assert_ptr_nonnull(comm);
  ncclResult_t async = ncclSuccess;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSystemError);
  ck_assert(contains(ncclGetLastError(comm), "cannot start a creation thread"));
  check_peer_told(t, &peer);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
}
END_TEST

void comm_local_add_create(TCase* tc) {
  tcase_add_test(tc, one_rank_queries);
  tcase_add_test(tc, init_arguments);
  tcase_add_test(tc, rendezvous_disagreements);
  tcase_add_test(tc, rendezvous_rank_refused);
  tcase_add_test(tc, rendezvous_timeout);
  tcase_add_test(tc, threads_one_rank_each);
  tcase_add_test(tc, group_creates_several_ranks);
  tcase_add_test(tc, split_in_group);
  tcase_add_test(tc, nonblocking_creation);
  tcase_add_test(tc, abort_pending_creation);
  tcase_add_test(tc, abort_pending_creation_tells_peers);
  tcase_add_test(tc, rendezvous_timeout_withdraws);
  tcase_add_test(tc, abort_during_destroy);
  tcase_add_test(tc, abort_blocking_creation);
  tcase_add_test(tc, destroy_blocking_creation);
  tcase_add_test(tc, abort_starting_creation);
  tcase_add_test(tc, destroy_in_group);
  tcase_add_test(tc, destroyed_comm_address_reused);
  tcase_add_test(tc, error_after_inline_creation);
  tcase_add_test(tc, error_after_group_creation);
  tcase_add_test(tc, group_creation_thread_not_started);
  tcase_add_test(tc, nonblocking_creation_thread_not_started);
}
