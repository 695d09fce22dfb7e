/*
 * test_comm_local.c - communicators whose ranks all live in this process
 * (no MPI launcher needed): creation from one thread per rank and from one
 * thread inside a group, split, non-blocking creation, queries, and the
 * argument checks of every data call.  Without a GPU the communicators are
 * host-only; with one they use the current device.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/alias.h"
#include "core/comm.h"
#include "core/param.h"
#include "core/topo.h"
#include "core/watchdog.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "p2p/p2p.h"
#include "p2p/push.h"
#include "transport.h"
#include "run_suite.h"

#define MAXR 8

/* A crash prints the crashing thread's stack before Check reports the
 * signal: the rare crash in getenv seen on the GPU machine (a setenv of
 * some thread beside a getenv of another) says nothing more without it.
 * Only async-signal-safe calls, then the default action. */
static void crash_report(int sig) {
  static const char head[] = "test_comm_local: fatal signal; stack of the crashing thread:\n";
  void* frames[64];
  ssize_t written = write(STDERR_FILENO, head, sizeof(head) - 1);
  (void)written;
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

static int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

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
  unsigned delay_us; /* before the call */
  ncclComm_t comm;
  ncclResult_t res;
  char error[256];
} rank_arg_t;

static void* init_rank_thread(void* p) {
  rank_arg_t* a = p;
  if (a->delay_us) usleep(a->delay_us);
  a->res = ncclCommInitRank(&a->comm, a->nranks, a->id, a->rank);
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
    for (int p = 0; p < 4; p++)
      ck_assert_int_eq(a[i].comm->transport[p], p == i ? 0 /* self */ : 1 /* local */);
  }
  for (int i = 0; i < 4; i++) ck_assert_int_eq(ncclCommDestroy(a[i].comm), ncclSuccess);
}
END_TEST

/* One thread creating several ranks inside a group (as NCCL programs do). */
static void group_create(ncclComm_t* comms, int n) {
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
  ck_assert_int_eq(ncclCommCount(comms[0], &n), ncclInvalidUsage);
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
  /* (valgrind's allocator holds freed blocks back: never reached there) */
  const char* preload = getenv("LD_PRELOAD");
  int valgrind = preload && strstr(preload, "vgpreload");
  ck_assert_msg(reused || valgrind, "no communicator got a destroyed one's address: the case was not reached");
}
END_TEST

START_TEST(send_recv_checks) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[64];
  ck_assert_int_eq(ncclSend(buf, 1, ncclFloat, 0, NULL, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "ncclSend: comm is NULL"));
  ck_assert_int_eq(ncclSend(buf, 1, (ncclDataType_t)17, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "datatype 17"));
  ck_assert_int_eq(ncclRecv(buf, 1, ncclFloat, 7, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "ncclRecv: peer 7 out of range [0, 1)"));
  ck_assert_int_eq(ncclRecv(buf, 1, ncclFloat, -1, comm, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclSend(NULL, 3, ncclFloat, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "sendbuff is NULL with count 3"));
  ck_assert_int_eq(ncclSend(buf, SIZE_MAX / 2, ncclFloat64, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "overflows"));
  /* No-ops: a null peer (an empty message is a message: below). */
  ck_assert_int_eq(ncclSend(buf, 4, ncclFloat, MPINCCL_PROC_NULL, comm, NULL), ncclSuccess);
  /* A missing neighbour needs no buffer, as with MPI_PROC_NULL; its datatype is still checked. */
  ck_assert_int_eq(ncclSend(NULL, 4, ncclFloat, MPINCCL_PROC_NULL, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclRecv(NULL, 4, ncclFloat, MPINCCL_PROC_NULL, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclRecv(NULL, 4, (ncclDataType_t)12, MPINCCL_PROC_NULL, comm, NULL), ncclInvalidArgument);
  if (comm->cuda_dev < 0) {
    /* A communicator without a GPU moves no data, nor messages of no bytes
     * (they are messages, as in NCCL). */
    ck_assert_int_eq(ncclSend(buf, 4, ncclFloat, 0, comm, NULL), ncclInvalidUsage);
    ck_assert(contains(ncclGetLastError(comm), "has no CUDA device"));
    ck_assert_int_eq(pncclRecv(buf, 4, ncclFloat, 0, comm, NULL), ncclInvalidUsage);
    ck_assert_int_eq(ncclRecv(NULL, 0, ncclFloat, 0, comm, NULL), ncclInvalidUsage);
  } else { /* a message of no bytes to itself, NULL buffers */
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclSend(NULL, 0, ncclFloat, 0, comm, NULL), ncclSuccess);
    ck_assert_int_eq(ncclRecv(NULL, 0, ncclFloat, 0, comm, NULL), ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert_int_eq(cudaDeviceSynchronize(), cudaSuccess);
  }
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  ck_assert_int_eq(ncclSend(buf, 1, ncclFloat, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(NULL), "not a live communicator"));
}
END_TEST

/* More than 512 messages to one peer in one group are refused before
 * anything is posted (a pair has 512 slots; p2p.c, group_size_check). */
START_TEST(group_size_limit) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[16];
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int k = 0; k < 513; k++) ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(comm), "513 ncclSend calls to rank 0 in one group; at most 512"));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Captured messages have a ring of 256 graph slots per pair side: more
 * than that to one peer in one group are refused before anything is posted
 * (desk review: the check allowed 512, so the 257th was refused only after
 * the others were posted, failing both communicators).  Each ring is
 * counted on its own: 300 plain and 256 captured fit. */
static ncclResult_t size_check(ncclComm_t comm, int plain, int captured) {
  int n = plain + captured;
  mpn_op_t* ops = calloc((size_t)n, sizeof(*ops));
  char buf[1];
  for (int i = 0; i < n; i++)
    ops[i] = (mpn_op_t){.kind = MPN_OP_SEND,
                        .comm = comm,
                        .buf = buf,
                        .count = 1,
                        .bytes = 1,
                        .peer = 0,
                        .capturing = i >= plain,
                        .next = i + 1 < n ? &ops[i + 1] : NULL};
  ncclResult_t res = mpn_p2p_check(ops);
  free(ops);
  return res;
}

START_TEST(group_size_limit_captured) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  ck_assert_int_eq(size_check(comm, 0, 257), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(comm), "257 captured ncclSend calls to rank 0 in one group; at most 256"));
  ncclResult_t res = size_check(comm, 300, 256); /* then refused without a GPU only */
  ck_assert(res == ncclSuccess || (res == ncclInvalidUsage && contains(ncclGetLastError(comm), "no CUDA device")));
  ck_assert_int_eq(size_check(comm, 513, 0), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(comm), "513 ncclSend calls to rank 0 in one group; at most 512"));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Errors inside a group: returned by the call and again by ncclGroupEnd. */
START_TEST(group_errors) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[16];
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess); /* nested */
  ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, MPINCCL_PROC_NULL, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclRecv(buf, 1, ncclInt8, 3, comm, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess); /* inner end: nothing runs yet */
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "peer 3"));
  /* The failed group left nothing behind: a group with only a null peer succeeds. */
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, MPINCCL_PROC_NULL, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* numRmaCtx 0 (NCCL 2.30: RMA disabled on the communicator): created, and
 * every one-sided call is refused on ctx 0, which is out of [0, 0). */
START_TEST(rma_no_contexts) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.numRmaCtx = 0;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclSuccess);
  ck_assert_ptr_nonnull(comm);
  char buf[16];
  ncclWindow_t win = (ncclWindow_t)buf;
  ck_assert_int_eq(ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 0, 0, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm),
                     "ncclPutSignal: ctx 0 out of range [0, 0) (numRmaCtx 0: the "
                     "communicator has no one-sided operations)"));
  ck_assert_int_eq(ncclSignal(0, 0, 0, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "ncclSignal: ctx 0 out of range [0, 0)"));
  ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = 0, .sigIdx = 0, .ctx = 0};
  ck_assert_int_eq(ncclWaitSignal(1, &d, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "ncclWaitSignal: signalDescs[0]: ctx 0 out of range [0, 0)"));
  /* A split without a config inherits it. */
  ncclComm_t child = NULL;
  ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &child, NULL), ncclSuccess);
  ck_assert_int_eq(ncclSignal(0, 0, 0, 0, child, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(child), "numRmaCtx 0"));
  ck_assert_int_eq(ncclCommDestroy(child), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(rma_checks) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[16];
  ncclWindow_t win = (ncclWindow_t)buf;
  ck_assert_int_eq(ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 1, 0, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "sigIdx 1"));
  ck_assert_int_eq(ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 0, 0, 2, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "flags 0x2"));
  ck_assert_int_eq(ncclPutSignal(buf, 1, ncclInt8, 0, NULL, 0, 0, 0, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "peerWin is NULL"));
  ck_assert_int_eq(ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 0, 1, 0, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "ctx 1 out of range [0, 1)"));
  ck_assert_int_eq(ncclPutSignal(buf, 1, ncclInt8, 2, win, 0, 0, 0, 0, comm, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclSignal(0, 0, 0, 1, comm, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclSignal(5, 0, 0, 0, comm, NULL), ncclInvalidArgument);
  ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = 0, .sigIdx = 0, .ctx = 0};
  ck_assert_int_eq(ncclWaitSignal(0, &d, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "nDesc 0"));
  ck_assert_int_eq(ncclWaitSignal(1, NULL, comm, NULL), ncclInvalidArgument);
  d.opCnt = 0;
  ck_assert_int_eq(ncclWaitSignal(1, &d, comm, NULL), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "signalDescs[0].opCnt 0"));
  d.opCnt = 1;
  /* A communicator without a GPU has nothing to signal with (on a machine
   * with a GPU the communicator gets one: a signal to itself is fine). */
  int dev = -1;
  ck_assert_int_eq(ncclCommCuDevice(comm, &dev), ncclSuccess);
  if (dev < 0) {
    ck_assert_int_eq(ncclSignal(0, 0, 0, 0, comm, NULL), ncclInvalidUsage);
    ck_assert_int_eq(ncclWaitSignal(1, &d, comm, NULL), ncclInvalidUsage);
    ck_assert(contains(ncclGetLastError(comm), "has no CUDA device"));
  }
  void* user = NULL;
  ck_assert_int_eq(ncclWinGetUserPtr(comm, win, &user), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "is not a window of comm"));
  ck_assert_int_eq(ncclCommWindowDeregister(comm, win), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "is not a window of comm"));
  ncclWindow_t w = NULL;
  ck_assert_int_eq(ncclCommWindowRegister(comm, buf + 1, 64, &w, NCCL_WIN_DEFAULT), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(comm), "NCCL_WIN_REQUIRED_ALIGNMENT"));
  ck_assert_int_eq(ncclCommWindowRegister(comm, NULL, 64, &w, 0), ncclInvalidArgument);
  ck_assert_ptr_null(w);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Registration is a hint; its handles belong to one communicator. */
START_TEST(register_handles) {
  use_local_bootstrap();
  ncclComm_t a = comm_of_one(), b = comm_of_one();
  char buf[64];
  void *h = NULL, *h2 = NULL;
  ck_assert_int_eq(ncclCommRegister(a, buf, sizeof(buf), &h), ncclSuccess);
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(ncclCommRegister(a, NULL, 8, &h2), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommRegister(a, buf, 0, &h2), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommRegister(a, buf, 8, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommDeregister(b, h), ncclInvalidArgument);
  ck_assert(contains(ncclGetLastError(b), "not returned by ncclCommRegister"));
  ck_assert_int_eq(ncclCommDeregister(a, h), ncclSuccess);
  ck_assert_int_eq(ncclCommDeregister(a, h), ncclInvalidArgument); /* twice */
  ck_assert_int_eq(ncclCommRegister(a, buf, 8, &h2), ncclSuccess); /* freed by destroy */
  ck_assert_int_eq(ncclCommDeregister(a, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommDestroy(a), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(b), ncclSuccess);
}
END_TEST

/* Rank r of t as on GPU gpu (0, 1, 2: three GPUs of this host) of process
 * proc, listing the GPUs in apart as out of its GPU's reach. */
static void describe_gpu(mpn_topo_t* t, int r, int gpu, uint64_t proc, const int* apart, int napart) {
  static const char* bus[3] = {"0000:1a:00.0", "0000:2b:00.0", "0000:3c:00.0"};
  mpn_rank_info_t* x = &t->ranks[r];
  x->cuda_dev = gpu;
  x->proc = proc;
  memset(x->uuid, 0, sizeof(x->uuid));
  x->uuid[0] = (unsigned char)(gpu + 1);
  memset(x->pci_bus, 0, sizeof(x->pci_bus));
  memcpy(x->pci_bus, bus[gpu], strlen(bus[gpu]));
  x->napart = napart;
  for (int i = 0; i < napart; i++) {
    char b[16] = {0};
    memcpy(b, bus[apart[i]], strlen(bus[apart[i]]));
    x->apart[i] = mpn_topo_bus_hash(b);
  }
}

/* Communicators whose rank 0 sees a made-up topology (describe_gpu) and
 * transports; synthetic_end puts the real ones back and destroys them. */
typedef struct {
  ncclComm_t comms[MAXR];
  int n;
  mpn_rank_info_t saved[MAXR];
  uint8_t kinds[MAXR];
} synthetic_t;

static mpn_topo_t* synthetic_begin(synthetic_t* s, int n) {
  use_local_bootstrap();
  s->n = n;
  group_create(s->comms, n);
  mpn_topo_t* t = &s->comms[0]->topo;
  memcpy(s->saved, t->ranks, (size_t)n * sizeof(s->saved[0]));
  memcpy(s->kinds, s->comms[0]->transport, (size_t)n * sizeof(s->kinds[0]));
  return t;
}

static void synthetic_end(synthetic_t* s) {
  memcpy(s->comms[0]->topo.ranks, s->saved, (size_t)s->n * sizeof(s->saved[0]));
  memcpy(s->comms[0]->transport, s->kinds, (size_t)s->n * sizeof(s->kinds[0]));
  for (int i = 0; i < s->n; i++) ck_assert_int_eq(ncclCommDestroy(s->comms[i]), ncclSuccess);
}

/* Peers on other GPUs of the host: reached directly (CUDA IPC, or plain
 * pointers within a process) unless either rank's process sees the other's
 * GPU and finds no peer access both ways; the others go through UCX, and
 * MPINCCL_TRANSPORT=ipc refuses them by name.  A GPU a process does not
 * see (CUDA_VISIBLE_DEVICES) counts as reachable, but not another MIG
 * instance of the same GPU. */
START_TEST(peer_gpus_reached) {
  synthetic_t syn;
  mpn_topo_t* t = synthetic_begin(&syn, 5);
  ncclComm_t* comms = syn.comms;
  uint64_t me = t->ranks[0].proc;
  const int gpu2[1] = {2}, gpu0[1] = {0};
  describe_gpu(t, 0, 0, me, gpu2, 1);     /* this rank: GPU 0, which cannot map GPU 2 */
  describe_gpu(t, 1, 0, me + 1, NULL, 0); /* another process on GPU 0 */
  describe_gpu(t, 2, 1, me + 2, NULL, 0); /* GPU 1: nobody finds it apart */
  describe_gpu(t, 3, 2, me + 3, NULL, 0); /* GPU 2, its process sees no other GPU */
  describe_gpu(t, 4, 2, me, gpu0, 1);     /* this process, GPU 2 */
  ck_assert(mpn_topo_direct(t, 0, 1));
  ck_assert(mpn_topo_direct(t, 0, 2) && mpn_topo_direct(t, 2, 0));
  ck_assert(!mpn_topo_direct(t, 0, 3) && !mpn_topo_direct(t, 3, 0)); /* one side's word is enough */
  ck_assert(!mpn_topo_direct(t, 0, 4));
  t->ranks[2].napart = 1; /* GPU 1's process finds GPU 0 apart */
  t->ranks[2].apart[0] = t->ranks[4].apart[0];
  ck_assert(!mpn_topo_direct(t, 0, 2) && !mpn_topo_direct(t, 2, 0));
  t->ranks[2].napart = 0;
  t->ranks[2].host_hash ^= 1; /* the same GPUs on another host */
  ck_assert(!mpn_topo_direct(t, 0, 2));
  t->ranks[2].host_hash ^= 1;
  t->ranks[1].cuda_dev = -1; /* a rank without a GPU */
  ck_assert(!mpn_topo_direct(t, 0, 1));
  t->ranks[1].cuda_dev = 0;
  t->ranks[1].uuid[1] = 7; /* another MIG instance of GPU 0: same PCI bus, another UUID */
  ck_assert(!mpn_topo_direct(t, 0, 1) && !mpn_topo_direct(t, 1, 0));
  t->ranks[1].uuid[1] = 0;
#ifdef HAVE_UCX
  ck_assert_int_eq(mpn_transport_choose(comms[0]), ncclSuccess);
  const uint8_t want[5] = {MPN_TRANSPORT_SELF, MPN_TRANSPORT_IPC, MPN_TRANSPORT_IPC, MPN_TRANSPORT_UCX,
                           MPN_TRANSPORT_UCX};
  for (int p = 0; p < 5; p++) ck_assert_int_eq(comms[0]->transport[p], want[p]);
  set_param("MPINCCL_TRANSPORT", "ipc");
  ck_assert_int_eq(mpn_transport_choose(comms[0]), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(comms[0]), "rank 3 (host"));
  ck_assert(contains(ncclGetLastError(comms[0]), "GPU 0000:3c:00.0) cannot be reached by CUDA IPC"));
  unsetenv("MPINCCL_TRANSPORT");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
#endif
  synthetic_end(&syn);
}
END_TEST

/* Which ops of a launch (up to 8, the first n_p2p in the send/receive list,
 * the rest one-sided) move to alias streams: op i on stream s[i] of a
 * communicator on device dev[i]. */
static int alias_moves(const cudaStream_t* s, const int* dev, int n, int n_p2p, unsigned char* moved) {
  struct ncclComm comms[8];
  mpn_op_t ops[8];
  memset(comms, 0, sizeof(comms));
  memset(ops, 0, sizeof(ops));
  mpn_op_t* lists[2] = {n_p2p ? &ops[0] : NULL, n_p2p < n ? &ops[n_p2p] : NULL};
  for (int i = 0; i < n; i++) {
    comms[i].cuda_dev = dev[i];
    ops[i] = (mpn_op_t){.kind = i < n_p2p ? MPN_OP_SEND : MPN_OP_SIGNAL, .comm = &comms[i], .stream = s[i]};
    if (i + 1 < n && i + 1 != n_p2p) ops[i].next = &ops[i + 1];
  }
  return mpn_alias_select(lists, moved);
}

/* Default stream handles (NULL, cudaStreamLegacy, cudaStreamPerThread) name
 * one stream per device: in a launch over several GPUs the ops of every
 * device but the first that used the handle move to an alias stream
 * (core/alias.h); other handles, and handles used on one device, stay. */
START_TEST(alias_selection) {
  const cudaStream_t L = cudaStreamLegacy, T = cudaStreamPerThread, mine = (cudaStream_t)(uintptr_t)0x1000;
  unsigned char m[8];
  /* the legacy stream on GPUs 0, 1, 0, 1: the GPU 1 ops move */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, NULL, NULL, NULL}, (int[]){0, 1, 0, 1}, 4, 4, m), 2);
  ck_assert(!m[0] && m[1] && !m[2] && m[3]);
  /* one GPU, or a stream of the caller's own: nothing moves */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, T, NULL, T}, (int[]){2, 2, 2, 2}, 4, 4, m), 0);
  ck_assert_int_eq(alias_moves((cudaStream_t[]){mine, mine}, (int[]){0, 1}, 2, 2, m), 0);
  /* NULL and cudaStreamLegacy are different handles: each on one GPU */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, L}, (int[]){0, 1}, 2, 2, m), 0);
  /* the first GPU to use a handle keeps it, whichever that is */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){T, T, T, L, L}, (int[]){1, 0, 1, 0, 3}, 5, 5, m), 2);
  ck_assert(!m[0] && m[1] && !m[2] && !m[3] && m[4]);
  /* across the lists: a signal of GPU 1 after a send of GPU 0 */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, NULL, NULL}, (int[]){0, 0, 1}, 3, 2, m), 1);
  ck_assert(!m[0] && !m[1] && m[2]);
  /* the count alone */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){T, T}, (int[]){0, 1}, 2, 2, NULL), 1);
}
END_TEST

/* Which sends wait to move their own data (p2p/push.h): to another process
 * on another GPU, from MPINCCL_PUSH_MIN bytes, in a launch that receives as
 * much from that peer; nothing where MPINCCL_PUSH_WAIT_US is 0. */
static void push_marks(ncclComm_t c, const mpn_op_kind_t* kind, const int* peer, const size_t* bytes, int n,
                       int* marked) {
  mpn_op_t ops[8];
  plan_t plans[8];
  memset(ops, 0, sizeof(ops));
  memset(plans, 0, sizeof(plans));
  for (int i = 0; i < n; i++) {
    ops[i] = (mpn_op_t){.kind = kind[i], .comm = c, .peer = peer[i], .bytes = bytes[i], .count = bytes[i]};
    plans[i].op = &ops[i];
    plans[i].prepared = 1;
  }
  mpn_push_mark(plans, n);
  for (int i = 0; i < n; i++) marked[i] = plans[i].push;
}

START_TEST(push_own_sends) {
  synthetic_t syn;
  mpn_topo_t* t = synthetic_begin(&syn, 3);
  ncclComm_t* comms = syn.comms;
  uint64_t me = t->ranks[0].proc;
  describe_gpu(t, 0, 0, me, NULL, 0);
  describe_gpu(t, 1, 0, me + 1, NULL, 0); /* another process, same GPU */
  describe_gpu(t, 2, 1, me + 2, NULL, 0); /* another process, another GPU */
  comms[0]->transport[1] = comms[0]->transport[2] = MPN_TRANSPORT_IPC;
  const size_t big = 2 << 20, small = 512 << 10;
  const mpn_op_kind_t S = MPN_OP_SEND, R = MPN_OP_RECV;
  int m[8];
  /* sendrecv with rank 2, then with rank 1 (same GPU), in one launch */
  push_marks(comms[0], (mpn_op_kind_t[]){S, R, S, R}, (int[]){2, 2, 1, 1}, (size_t[]){big, big, big, big}, 4, m);
  ck_assert(m[0] && !m[1] && !m[2] && !m[3]);
  /* a small receive, or none, from rank 2: one side moves one direction anyway */
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, small}, 2, m);
  ck_assert(!m[0] && !m[1]);
  push_marks(comms[0], (mpn_op_kind_t[]){S, S}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0] && !m[1]);
  /* a small send with a large receive */
  push_marks(comms[0], (mpn_op_kind_t[]){R, S}, (int[]){2, 2}, (size_t[]){big, small}, 2, m);
  ck_assert(!m[0] && !m[1]);
  set_param("MPINCCL_PUSH_MIN", "4194304");
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0]);
  set_param("MPINCCL_PUSH_MIN", "1");
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){small, small}, 2, m);
  ck_assert(m[0] && !m[1]);
  set_param("MPINCCL_PUSH_WAIT_US", "0");
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0]);
  unsetenv("MPINCCL_PUSH_MIN");
  unsetenv("MPINCCL_PUSH_WAIT_US");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  comms[0]->transport[2] = MPN_TRANSPORT_LOCAL; /* ranks of this process: plain pointers, not pushed */
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0]);
  synthetic_end(&syn);
}
END_TEST

/* Two ranks of this process, rank 1 presented to rank 0 as another
 * process of this host whose pid now names no process; that pid. */
static pid_t pair_with_dead_peer(ncclComm_t comms[2]) {
  group_create(comms, 2);
  pid_t child = fork();
  if (child == 0) _exit(0);
  ck_assert_int_gt(child, 0);
  waitpid(child, NULL, 0);
  comms[0]->topo.ranks[1].proc ^= 1;
  comms[0]->topo.ranks[1].pid = child;
  return child;
}

/* A peer whose process is gone: ncclRemoteError with its name, once. */
START_TEST(watchdog_peer_gone) {
  use_local_bootstrap();
  ncclComm_t comms[2];
  pid_t child = pair_with_dead_peer(comms);
  ck_assert_int_eq(mpn_watchdog_check(comms[1]), 0); /* rank 0 is alive */
  ck_assert_int_eq(mpn_watchdog_check(comms[0]), 1);
  ck_assert_int_eq(mpn_watchdog_check(comms[0]), 0); /* reported once */
  ncclResult_t async;
  ck_assert_int_eq(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclRemoteError);
  char want[64];
  snprintf(want, sizeof(want), "rank 1 (process %d on", (int)child);
  ck_assert(contains(ncclGetLastError(comms[0]), want));
  ck_assert_int_eq(ncclCommGetAsyncError(comms[1], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSuccess);
  ck_assert_int_eq(ncclCommAbort(comms[0]), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comms[1]), ncclSuccess);
}
END_TEST

/* A peer that dies while a rank finalizes is found all the same: finalize
 * and destroy wait for the streams, which only the watchdog releases then
 * (README: "A peer that fails releases the waits"). */
START_TEST(watchdog_after_finalize) {
  use_local_bootstrap();
  ncclComm_t comms[2];
  pair_with_dead_peer(comms);
  ck_assert_int_eq(ncclCommFinalize(comms[0]), ncclSuccess); /* nothing enqueued: done at once */
  ck_assert_int_eq(mpn_watchdog_check(comms[0]), 1);
  ncclResult_t async;
  ck_assert_int_eq(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclRemoteError);
  ck_assert_int_eq(ncclCommAbort(comms[0]), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comms[1]), ncclSuccess);
}
END_TEST

/* Each thread reads its own last error. */
static void* error_thread(void* p) {
  intptr_t peer = (intptr_t)p;
  char want[64];
  snprintf(want, sizeof(want), "peer %d out of range", (int)peer);
  for (int i = 0; i < 1000; i++) {
    extern ncclComm_t shared_comm;
    if (ncclSend(want, 1, ncclInt8, (int)peer, shared_comm, NULL) != ncclInvalidArgument) return (void*)1;
    if (!contains(ncclGetLastError(NULL), want)) return (void*)1;
  }
  return NULL;
}
ncclComm_t shared_comm;

START_TEST(last_error_per_thread) {
  use_local_bootstrap();
  shared_comm = comm_of_one();
  pthread_t t[4];
  for (intptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, error_thread, (void*)(i + 10));
  for (int i = 0; i < 4; i++) {
    void* ret;
    pthread_join(t[i], &ret);
    ck_assert_ptr_null(ret);
  }
  ck_assert_int_eq(ncclCommDestroy(shared_comm), ncclSuccess);
}
END_TEST

/* A split without a color that fails in a group of several jobs (they run
 * on creation threads) reports its reason to the calling thread: the
 * failure's text, not an older one. */
START_TEST(split_nocolor_failure_text) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "1");
  ncclComm_t pair[2], one = comm_of_one(), none = NULL, sub = NULL;
  group_create(pair, 2);
  ck_assert_int_eq(ncclCommCount(one, NULL), ncclInvalidArgument); /* the older error */
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommSplit(pair[0], NCCL_SPLIT_NOCOLOR, 0, &none, NULL), ncclSuccess); /* pair[1] never splits */
  ck_assert_int_eq(ncclCommSplit(one, 0, 0, &sub, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclTimeout);
  ck_assert_ptr_null(none);
  const char* text = ncclGetLastError(NULL);
  ck_assert_msg(contains(text, "MPINCCL_BOOTSTRAP_TIMEOUT"), "ncclGetLastError(NULL): \"%s\"", text);
  if (sub) ck_assert_int_eq(ncclCommDestroy(sub), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(one), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommAbort(pair[i]), ncclSuccess);
}
END_TEST

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

/* Communicators created non-blocking and given windows in one group: the
 * registrations wait for their communicators' creation (each rank's is
 * bounded by the bootstrap's timeout), so every rank refuses the host
 * buffer alike.  They refused "still being created" instead, or, where
 * one rank's creation had ended first, one rank registered and waited
 * for a peer that had refused. */
START_TEST(windows_in_nonblocking_group) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "3");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclUniqueId id;
  ncclComm_t pair[2];
  ncclWindow_t win[2];
  void* buf = aligned_alloc(NCCL_WIN_REQUIRED_ALIGNMENT, NCCL_WIN_REQUIRED_ALIGNMENT);
  ck_assert_ptr_nonnull(buf);
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(ncclCommInitRankConfig(&pair[i], 2, id, i, &cfg), ncclSuccess);
    ck_assert_int_eq(ncclCommWindowRegister(pair[i], buf, NCCL_WIN_REQUIRED_ALIGNMENT, &win[i], 0), ncclSuccess);
  }
  ncclResult_t res = ncclGroupEnd();
  const char* text = ncclGetLastError(NULL);
  ck_assert_msg((res == ncclInvalidUsage || res == ncclInvalidArgument) && contains(text, "ncclCommWindowRegister") &&
                    !contains(text, "being created"),
                "ncclGroupEnd: %d, ncclGetLastError(NULL): \"%s\"", res, text);
  for (int i = 0; i < 2; i++) {
    ncclResult_t state;
    ck_assert_ptr_null(win[i]);
    ck_assert_int_eq(ncclCommGetAsyncError(pair[i], &state), ncclSuccess);
    ck_assert_int_eq(state, ncclSuccess); /* created before the registrations ran */
  }
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
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, window_register_thread, &a), 0);
    usleep(200000); /* rank 0 waits in the registration's allgather for rank 1 */
    ck_assert_int_eq(ncclCommAbort(pair[0]), ncclSuccess);
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

/* What a forked child got from ncclCommInitRank. */
typedef struct {
  ncclResult_t parents_id, own_id;
  char text[256];
} fork_report_t;

static void forked_child(int fd, ncclUniqueId parents) {
  fork_report_t r = {0};
  ncclComm_t comm = NULL;
  r.parents_id = ncclCommInitRank(&comm, 2, parents, 1);
  snprintf(r.text, sizeof(r.text), "%s", ncclGetLastError(NULL));
  ncclUniqueId own;
  r.own_id = ncclGetUniqueId(&own);
  if (r.own_id == ncclSuccess) r.own_id = ncclCommInitRank(&comm, 1, own, 0);
  if (r.own_id == ncclSuccess) r.own_id = ncclCommDestroy(comm);
  ssize_t n = write(fd, &r, sizeof(r));
  _exit(n == (ssize_t)sizeof(r) ? 0 : 1);
}

/* A child of fork() is another process: an id its parent made without MPI
 * is refused there at once (the child took itself for the id's maker and
 * waited out MPINCCL_BOOTSTRAP_TIMEOUT), and an id of its own works. */
START_TEST(forked_child_is_another_process) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "3");
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) forked_child(fds[1], id);
  close(fds[1]);
  fork_report_t r;
  ck_assert_int_eq(read(fds[0], &r, sizeof(r)), (ssize_t)sizeof(r));
  close(fds[0]);
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(r.parents_id == ncclInvalidUsage && contains(r.text, "another process"),
                "child with its parent's id: %d \"%s\"", r.parents_id, r.text);
  ck_assert_int_eq(r.own_id, ncclSuccess);
}
END_TEST

/* Bootstrap collectives among threads of this process. */
typedef struct {
  mpn_bootstrap_id_t id;
  int nranks, rank, ok;
} boot_arg_t;

static void* boot_thread(void* p) {
  boot_arg_t* a = p;
  mpn_bootstrap_t *b = NULL, *child = NULL;
  if (mpn_bootstrap_rendezvous(&a->id, a->nranks, a->rank, NULL, &b) != ncclSuccess) return NULL;
  int vals[MAXR];
  vals[a->rank] = 100 + a->rank;
  int ok = mpn_bootstrap_allgather(b, vals, sizeof(int)) == ncclSuccess;
  for (int i = 0; i < a->nranks; i++) ok &= vals[i] == 100 + i;
  long big[1000];
  int root = a->nranks - 1;
  if (a->rank == root) for (int i = 0; i < 1000; i++) big[i] = i * 7;
  ok &= mpn_bootstrap_bcast(b, big, sizeof(big), root) == ncclSuccess;
  for (int i = 0; i < 1000; i++) ok &= big[i] == i * 7;
  ok &= mpn_bootstrap_barrier(b) == ncclSuccess;
  /* Point to point around the ring, receiver posting late. */
  int next = (a->rank + 1) % a->nranks, prev = (a->rank + a->nranks - 1) % a->nranks, got = -1;
  ok &= mpn_bootstrap_send(b, next, 5, &a->rank, sizeof(int)) == ncclSuccess;
  ok &= mpn_bootstrap_recv(b, prev, 5, &got, sizeof(int)) == ncclSuccess;
  ok &= got == prev;
  ok &= mpn_bootstrap_split(b, a->rank % 2, -a->rank, NULL, &child) == ncclSuccess;
  if (child) {
    int expect_n = (a->nranks + 1 - a->rank % 2) / 2;
    ok &= child->nranks == expect_n;
    ok &= child->rank == expect_n - 1 - a->rank / 2; /* keys reversed */
    ok &= mpn_bootstrap_barrier(child) == ncclSuccess;
    mpn_bootstrap_destroy(child);
  }
  mpn_bootstrap_destroy(b);
  a->ok = ok;
  return NULL;
}

START_TEST(bootstrap_collectives_threads) {
  use_local_bootstrap();
  for (int n = 1; n <= 5; n++) {
    boot_arg_t a[MAXR];
    pthread_t t[MAXR];
    mpn_bootstrap_id_t id;
    ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
    for (int i = 0; i < n; i++) {
      a[i] = (boot_arg_t){.id = id, .nranks = n, .rank = i};
      pthread_create(&t[i], NULL, boot_thread, &a[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++) ck_assert_msg(a[i].ok, "n=%d rank %d failed", n, i);
  }
}
END_TEST

int main(void) {
  Suite* s = suite_create("comm_local");
  TCase* tc = tcase_create("comm_local");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, one_rank_queries);
  tcase_add_test(tc, init_arguments);
  tcase_add_test(tc, rendezvous_disagreements);
  tcase_add_test(tc, rendezvous_timeout);
  tcase_add_test(tc, threads_one_rank_each);
  tcase_add_test(tc, group_creates_several_ranks);
  tcase_add_test(tc, split_in_group);
  tcase_add_test(tc, nonblocking_creation);
  tcase_add_test(tc, abort_pending_creation);
  tcase_add_test(tc, abort_during_destroy);
  tcase_add_test(tc, destroy_in_group);
  tcase_add_test(tc, destroyed_comm_address_reused);
  tcase_add_test(tc, send_recv_checks);
  tcase_add_test(tc, group_errors);
  tcase_add_test(tc, group_size_limit);
  tcase_add_test(tc, group_size_limit_captured);
  tcase_add_test(tc, rma_checks);
  tcase_add_test(tc, rma_no_contexts);
  tcase_add_test(tc, last_error_per_thread);
  tcase_add_test(tc, register_handles);
  tcase_add_test(tc, watchdog_peer_gone);
  tcase_add_test(tc, watchdog_after_finalize);
  tcase_add_test(tc, peer_gpus_reached);
  tcase_add_test(tc, push_own_sends);
  tcase_add_test(tc, alias_selection);
  tcase_add_test(tc, bootstrap_collectives_threads);
  tcase_add_test(tc, split_nocolor_failure_text);
  tcase_add_test(tc, forked_child_is_another_process);
  tcase_add_test(tc, windows_in_group);
  tcase_add_test(tc, window_in_refused_group);
  tcase_add_test(tc, split_then_window);
  tcase_add_test(tc, windows_in_nonblocking_group);
  tcase_add_test(tc, window_register_aborted);
  suite_add_tcase(s, tc);
  /* Each test runs in a forked child, which inherits these handlers;
   * backtrace loads what it needs on its first call, here rather than in
   * the handler. */
  void* first[1];
  (void)backtrace(first, 1);
  signal(SIGSEGV, crash_report);
  signal(SIGBUS, crash_report);
  return unit_suite_run(s);
}
