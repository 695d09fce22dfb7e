/*
 * test_funneled.c - creation under MPI_THREAD_FUNNELED (run by tests/run-test
 * under mpirun with 1 to 4 ranks): the library must call MPI only from the
 * main thread, the one the application calls it from, whatever runs on its
 * own creation threads.  Every MPI function the library uses is wrapped here
 * (the MPI profiling interface) and counts calls made off the main thread.
 * Covered: non-blocking ncclCommInitRankConfig polled with
 * ncclCommGetAsyncError, two ranks of one process created in one group,
 * mpincclCommInitMPI and splits of it (MPI_Comm_split, one rank without a
 * color) non-blocking and blocking, two splits without a color of two
 * MPI-made communicators in one group, a split without a color of a
 * communicator with two ranks in each process, the abort of a creation
 * that cannot complete, from the main thread and from another, and the
 * abort, from another thread, of creations waiting for the turn of an
 * earlier one of the main thread (the order of turns kept), the abort, from
 * another thread, of a parent whose splits wait for their MPI turn or for
 * MPI_Comm_split, and for each other, and the destroy of a parent right
 * after non-blocking splits of it, and the destroy of a split of an
 * MPI-made communicator on another thread (its MPI_Comm_free).
 */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi_test.h"
#include "mpinccl.h"

static int world_rank, world_size;
static pthread_t main_thread;
static long calls_main, calls_off_main;
static const char* first_off_main;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "world", world_rank, "last error: ")
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

/* Counts a call to MPI by the thread it came from. */
static void seen(const char* fn) {
  if (pthread_equal(pthread_self(), main_thread)) {
    __atomic_add_fetch(&calls_main, 1, __ATOMIC_RELAXED);
    return;
  }
  __atomic_add_fetch(&calls_off_main, 1, __ATOMIC_RELAXED);
  const char* none = NULL;
  __atomic_compare_exchange_n(&first_off_main, &none, fn, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* Library calls on two watched MPI communicators (or the duplicates the
 * library made of them, dups: its set-up runs on those), numbered in the
 * order made: one creation's calls must all come before the next one's. */
static MPI_Comm watched[2] = {MPI_COMM_NULL, MPI_COMM_NULL};
static long watch_seq, watch_first[2], watch_last[2];
enum { DUPS = 4096 };
static MPI_Comm dups[DUPS][2]; /* [original, duplicate] */
static int ndups;

static void dup_made(MPI_Comm comm, MPI_Comm dup) {
  int k = __atomic_fetch_add(&ndups, 1, __ATOMIC_RELAXED);
  if (k < DUPS) {
    dups[k][0] = comm;
    dups[k][1] = dup;
  }
}

/* (newest first: MPI hands a freed communicator's handle out again) */
static MPI_Comm original_of(MPI_Comm comm) {
  int n = __atomic_load_n(&ndups, __ATOMIC_RELAXED);
  for (int k = (n < DUPS ? n : DUPS) - 1; k >= 0; k--)
    if (dups[k][1] == comm) return dups[k][0];
  return comm;
}

static void seen_on(const char* fn, MPI_Comm comm) {
  seen(fn);
  comm = original_of(comm);
  for (int i = 0; i < 2; i++) {
    if (comm == MPI_COMM_NULL || comm != watched[i]) continue;
    long n = __atomic_add_fetch(&watch_seq, 1, __ATOMIC_RELAXED);
    if (watch_first[i] == 0) watch_first[i] = n;
    watch_last[i] = n;
  }
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
  seen("MPI_Isend");
  return PMPI_Isend(buf, count, type, dest, tag, comm, req);
}
int MPI_Test(MPI_Request* req, int* flag, MPI_Status* status) {
  seen("MPI_Test");
  return PMPI_Test(req, flag, status);
}
int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  seen("MPI_Improbe");
  return PMPI_Improbe(source, tag, comm, flag, message, status);
}
int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
  seen("MPI_Mrecv");
  return PMPI_Mrecv(buf, count, type, message, status);
}
int MPI_Get_count(const MPI_Status* status, MPI_Datatype type, int* count) {
  seen("MPI_Get_count");
  return PMPI_Get_count(status, type, count);
}
int MPI_Ibcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* req) {
  seen_on("MPI_Ibcast", comm);
  return PMPI_Ibcast(buf, count, type, root, comm, req);
}
int MPI_Iallgather(const void* sbuf, int scount, MPI_Datatype stype, void* rbuf, int rcount, MPI_Datatype rtype,
                   MPI_Comm comm, MPI_Request* req) {
  seen_on("MPI_Iallgather", comm);
  return PMPI_Iallgather(sbuf, scount, stype, rbuf, rcount, rtype, comm, req);
}
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  seen_on("MPI_Comm_split", comm);
  return PMPI_Comm_split(comm, color, key, out);
}
int MPI_Comm_rank(MPI_Comm comm, int* rank) {
  seen_on("MPI_Comm_rank", comm);
  return PMPI_Comm_rank(comm, rank);
}
int MPI_Comm_size(MPI_Comm comm, int* size) {
  seen_on("MPI_Comm_size", comm);
  return PMPI_Comm_size(comm, size);
}
int MPI_Comm_test_inter(MPI_Comm comm, int* flag) {
  seen_on("MPI_Comm_test_inter", comm);
  return PMPI_Comm_test_inter(comm, flag);
}
int MPI_Comm_idup(MPI_Comm comm, MPI_Comm* out, MPI_Request* req) {
  seen_on("MPI_Comm_idup", comm); /* (the set-up's first collective) */
  int err = PMPI_Comm_idup(comm, out, req);
  if (err == MPI_SUCCESS) dup_made(comm, *out);
  return err;
}
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) {
  seen("MPI_Comm_dup");
  int err = PMPI_Comm_dup(comm, out);
  if (err == MPI_SUCCESS) dup_made(comm, *out);
  return err;
}
static long comm_frees;
int MPI_Comm_free(MPI_Comm* comm) {
  seen("MPI_Comm_free");
  __atomic_add_fetch(&comm_frees, 1, __ATOMIC_RELAXED);
  return PMPI_Comm_free(comm);
}
int MPI_Cancel(MPI_Request* req) {
  seen("MPI_Cancel");
  return PMPI_Cancel(req);
}
int MPI_Request_free(MPI_Request* req) {
  seen("MPI_Request_free");
  return PMPI_Request_free(req);
}
int MPI_Comm_create_keyval(MPI_Comm_copy_attr_function* copy, MPI_Comm_delete_attr_function* del, int* keyval,
                           void* extra) {
  seen("MPI_Comm_create_keyval");
  return PMPI_Comm_create_keyval(copy, del, keyval, extra);
}
int MPI_Comm_set_attr(MPI_Comm comm, int keyval, void* value) {
  seen("MPI_Comm_set_attr");
  return PMPI_Comm_set_attr(comm, keyval, value);
}

static void expect_shape(ncclComm_t comm, int nranks, int rank) {
  int n = -1, r = -1;
  EXPECT_OK(ncclCommCount(comm, &n));
  EXPECT_OK(ncclCommUserRank(comm, &r));
  EXPECT(n == nranks);
  EXPECT(r == rank);
}

/* Polls comm (NULL: nothing to poll) until it is no longer in progress. */
static ncclResult_t poll_ready(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  if (comm == NULL) return state;
  do EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  while (state == ncclInProgress);
  return state;
}

static ncclConfig_t nonblocking(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  return cfg;
}

/* A unique id made by world rank 0, known to every process. */
static ncclUniqueId world_id(void) {
  ncclUniqueId id;
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  return id;
}

/* A non-blocking communicator over the world, from a unique id. */
static void test_nonblocking_rank(void) {
  ncclUniqueId id = world_id();
  ncclConfig_t cfg = nonblocking();
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRankConfig(&comm, world_size, id, world_rank, &cfg);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  EXPECT(poll_ready(comm) == ncclSuccess);
  expect_shape(comm, world_size, world_rank);
  EXPECT_OK(ncclCommDestroy(comm));
}

/* Two ranks per process from one thread in a group: each on a creation thread. */
static void test_group_two_ranks(void) {
  ncclUniqueId id = world_id();
  ncclComm_t comms[2] = {NULL, NULL};
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommInitRank(&comms[i], 2 * world_size, id, 2 * world_rank + i));
  EXPECT_OK(ncclGroupEnd());
  for (int i = 0; i < 2; i++) {
    expect_shape(comms[i], 2 * world_size, 2 * world_rank + i);
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
}

/* mpincclCommInitMPI, then splits of it (each keeps an MPI communicator). */
static void test_mpi_made(void) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  ncclConfig_t cfg = nonblocking();
  ncclComm_t comm = NULL;
  ncclResult_t res = mpincclCommInitMPI(&comm, dup, &cfg);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  EXPECT(poll_ready(comm) == ncclSuccess);
  expect_shape(comm, world_size, world_rank);
  /* Non-blocking (the parent's config): parity, the last of 3 or more
   * without a color (it runs on the calling thread: nothing would be polled
   * for it). */
  int nocolor = world_size >= 3 && world_rank == world_size - 1;
  ncclComm_t half = (ncclComm_t)0x1;
  res = ncclCommSplit(comm, nocolor ? NCCL_SPLIT_NOCOLOR : world_rank % 2, world_rank, &half, NULL);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  if (nocolor) EXPECT(half == NULL);
  EXPECT(poll_ready(half) == ncclSuccess);
  if (half) {
    int members = 0;
    for (int p = 0; p < world_size; p++)
      members += p % 2 == world_rank % 2 && !(world_size >= 3 && p == world_size - 1);
    expect_shape(half, members, world_rank / 2);
    MPI_Comm m = MPI_COMM_NULL;
    EXPECT_OK(mpincclCommGetMPIComm(half, &m));
    int msize = -1;
    if (m != MPI_COMM_NULL) MPI_Comm_size(m, &msize);
    EXPECT(msize == members);
    EXPECT_OK(ncclCommDestroy(half));
  }
  /* Blocking (a config, not the parent's), in reverse order. */
  ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
  ncclComm_t rev = NULL;
  EXPECT_OK(ncclCommSplit(comm, 0, -world_rank, &rev, &blocking));
  if (rev) {
    expect_shape(rev, world_size, world_size - 1 - world_rank);
    EXPECT_OK(ncclCommDestroy(rev));
  }
  EXPECT_OK(ncclCommDestroy(comm));
  MPI_Comm_free(&dup);
}

/* Two splits without a color, of two MPI-made communicators, in one
 * non-blocking group: run on the calling thread in the order of the calls
 * (the second waited for the first's turn for good when run first). */
static void test_two_nocolor_splits(void) {
  MPI_Comm d[2];
  ncclComm_t c[2] = {NULL, NULL}, k[2] = {(ncclComm_t)0x1, (ncclComm_t)0x1};
  ncclConfig_t cfg = nonblocking();
  for (int i = 0; i < 2; i++) {
    MPI_Comm_dup(MPI_COMM_WORLD, &d[i]);
    ncclResult_t res = mpincclCommInitMPI(&c[i], d[i], &cfg);
    EXPECT(res == ncclInProgress || res == ncclSuccess);
  }
  for (int i = 0; i < 2; i++) EXPECT(poll_ready(c[i]) == ncclSuccess);
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommSplit(c[i], NCCL_SPLIT_NOCOLOR, 0, &k[i], NULL));
  ncclResult_t res = ncclGroupEnd();
  EXPECT(res == ncclSuccess || res == ncclInProgress);
  for (int i = 0; i < 2; i++) {
    EXPECT(k[i] == NULL);
    EXPECT_OK(ncclCommDestroy(c[i]));
    MPI_Comm_free(&d[i]);
  }
}

/* A communicator with two ranks in each process: one rank's split without
 * a color must not wait for the other's split, issued after it. */
static void test_nocolor_two_per_process(void) {
  ncclUniqueId id = world_id();
  ncclConfig_t cfg = nonblocking();
  ncclComm_t c[2] = {NULL, NULL};
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < 2; i++) {
    ncclResult_t res = ncclCommInitRankConfig(&c[i], 2 * world_size, id, 2 * world_rank + i, &cfg);
    EXPECT(res == ncclInProgress || res == ncclSuccess);
  }
  ncclResult_t res = ncclGroupEnd();
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  for (int i = 0; i < 2; i++) EXPECT(poll_ready(c[i]) == ncclSuccess);
  ncclComm_t none = (ncclComm_t)0x1, all = NULL;
  res = ncclCommSplit(c[0], NCCL_SPLIT_NOCOLOR, 0, &none, NULL);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  res = ncclCommSplit(c[1], 0, 0, &all, NULL);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  EXPECT(none == NULL);
  EXPECT(poll_ready(all) == ncclSuccess);
  if (all) {
    expect_shape(all, world_size, world_rank);
    EXPECT_OK(ncclCommDestroy(all));
  }
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommDestroy(c[i]));
}

static void* abort_thread(void* arg) {
  ncclComm_t comm = arg;
  return (void*)(intptr_t)ncclCommAbort(comm);
}

/* A creation whose last rank never comes: abort ends it.  A rank whose
 * peer aborted first finds its creation failed (the aborted rank took its
 * place in the rendezvous back), not still pending. */
static void test_abort_pending(void) {
  ncclUniqueId id = world_id();
  ncclConfig_t cfg = nonblocking();
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRankConfig(&comm, world_size + 1, id, world_rank, &cfg);
  EXPECT(res == ncclInProgress);
  ncclResult_t state = ncclSuccess;
  for (int i = 0; i < 100; i++) EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  EXPECT(state == ncclInProgress || state == ncclRemoteError);
  EXPECT_OK(ncclCommAbort(comm));
  MPI_Barrier(MPI_COMM_WORLD);
  /* Again, aborted by another thread (as a watchdog would): it may not
   * call MPI, and the creation must stop all the same. */
  id = world_id();
  comm = NULL;
  res = ncclCommInitRankConfig(&comm, world_size + 1, id, world_rank, &cfg);
  EXPECT(res == ncclInProgress);
  for (int i = 0; i < 100; i++) EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  pthread_t t;
  void* ret = (void*)(intptr_t)ncclInternalError;
  EXPECT(pthread_create(&t, NULL, abort_thread, comm) == 0);
  pthread_join(t, &ret);
  EXPECT((ncclResult_t)(intptr_t)ret == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Polls comm (NULL: nothing to poll) for at most seconds; ncclInProgress
 * when it was still being created then. */
static ncclResult_t poll_for(ncclComm_t comm, int seconds) {
  ncclResult_t state = ncclSuccess;
  for (int ms = 0; comm && ms <= 1000 * seconds; ms++) {
    EXPECT_OK(ncclCommGetAsyncError(comm, &state));
    if (state != ncclInProgress) break;
    usleep(1000);
  }
  return state;
}

typedef struct {
  ncclComm_t victims[2];
  ncclResult_t res;
  int done; /* atomic */
} aborter_t;

static void* abort_victims(void* arg) {
  aborter_t* a = arg;
  a->res = ncclSuccess;
  for (int i = 0; i < 2; i++)
    if (a->victims[i] && a->res == ncclSuccess) a->res = ncclCommAbort(a->victims[i]);
  __atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Starts a thread (*t) that aborts a's victims and waits at most 10 s,
 * without calling the library, for the aborts to return: whether they did. */
static int aborted_within_10s(aborter_t* a, pthread_t* t) {
  EXPECT(pthread_create(t, NULL, abort_victims, a) == 0);
  for (int ms = 0; ms < 10000 && !__atomic_load_n(&a->done, __ATOMIC_ACQUIRE); ms++) usleep(1000);
  return __atomic_load_n(&a->done, __ATOMIC_ACQUIRE);
}

/* Another thread aborts the victims, creations waiting for the turn of an
 * earlier one of this thread, while this thread waits for it without
 * calling the library: the earlier creations cannot move meanwhile (their
 * MPI work waits for the main thread), so the aborts return only if they
 * end the waits for turns.  Then the survivors complete once polled (which
 * also lets aborts stuck in such waits end). */
static void abort_waiting(ncclComm_t survivors[2], ncclComm_t victims[2], const char* what) {
  aborter_t a = {{victims[0], victims[1]}, ncclInternalError, 0};
  pthread_t t;
  int done = aborted_within_10s(&a, &t);
  if (!done)
    fprintf(stderr, "[world %d] %s: ncclCommAbort of a creation waiting for its turn still waits after 10 s\n",
            world_rank, what);
  EXPECT(done);
  for (int i = 0; i < 2; i++) EXPECT(poll_for(survivors[i], 30) == ncclSuccess);
  pthread_join(t, NULL);
  EXPECT(a.res == ncclSuccess);
}

/* Non-blocking creations of the main thread run their MPI collectives in
 * call order (turns): four mpincclCommInitMPI, the second and fourth
 * aborted while the first holds its turn; two splits of the first, the
 * second aborted; a mpincclCommInitMPI and a split of the third, the split
 * aborted (with one rank its bootstrap split needs nobody: it then waits
 * for its MPI turn; with more the abort ends its bootstrap split, and its
 * MPI turn must pass unused).  Each abort must end its creation's wait,
 * and the turns stay in order: the third runs only after the first, and
 * later creations pass over the aborted ones' turns. */
static void test_abort_waiting_turn(void) {
  MPI_Comm d[4];
  ncclComm_t c[4] = {NULL, NULL, NULL, NULL};
  ncclConfig_t cfg = nonblocking();
  for (int i = 0; i < 4; i++) MPI_Comm_dup(MPI_COMM_WORLD, &d[i]);
  /* (before the creations: a later call's duplication drives the first's set-up) */
  watched[0] = d[0];
  watched[1] = d[2];
  for (int i = 0; i < 4; i++) EXPECT(mpincclCommInitMPI(&c[i], d[i], &cfg) == ncclInProgress);
  abort_waiting((ncclComm_t[2]){c[0], c[2]}, (ncclComm_t[2]){c[1], c[3]}, "mpincclCommInitMPI");
  EXPECT(watch_first[0] > 0 && watch_first[1] > watch_last[0]); /* the third after the first */
  watched[0] = watched[1] = MPI_COMM_NULL;
  ncclComm_t s[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) EXPECT(ncclCommSplit(c[0], 0, world_rank, &s[i], NULL) == ncclInProgress);
  abort_waiting((ncclComm_t[2]){s[0], NULL}, (ncclComm_t[2]){s[1], NULL}, "ncclCommSplit");
  MPI_Comm e;
  MPI_Comm_dup(MPI_COMM_WORLD, &e);
  ncclComm_t x = NULL, y = NULL;
  EXPECT(mpincclCommInitMPI(&x, e, &cfg) == ncclInProgress);
  EXPECT(ncclCommSplit(c[2], 0, world_rank, &y, NULL) == ncclInProgress);
  abort_waiting((ncclComm_t[2]){x, NULL}, (ncclComm_t[2]){y, NULL}, "ncclCommSplit of an MPI-made communicator");
  /* The aborted creations' turns were passed over: a new one has its turn. */
  ncclComm_t last = NULL;
  EXPECT(ncclCommSplit(c[2], 0, world_rank, &last, NULL) == ncclInProgress);
  EXPECT(poll_for(last, 30) == ncclSuccess);
  expect_shape(s[0], world_size, world_rank);
  expect_shape(last, world_size, world_rank);
  ncclComm_t keep[5] = {s[0], last, x, c[0], c[2]};
  for (int i = 0; i < 5; i++) { /* (a creation still in progress, after a failure, is aborted) */
    ncclResult_t state = ncclSuccess;
    EXPECT_OK(ncclCommGetAsyncError(keep[i], &state));
    EXPECT_OK(state == ncclInProgress ? ncclCommAbort(keep[i]) : ncclCommDestroy(keep[i]));
  }
  for (int i = 0; i < 4; i++) MPI_Comm_free(&d[i]);
  MPI_Comm_free(&e);
}

/* Another thread aborts a parent while two non-blocking splits of it wait:
 * the first for its MPI turn, behind a mpincclCommInitMPI of this thread
 * (with_holder), or for this thread to call MPI_Comm_split for it; the
 * second for the first's turn among the parent's splits.  The parent is
 * made from MPI_COMM_SELF: its bootstrap split needs nobody, so the first
 * split is past it (where the abort ended it before).  This thread waits
 * without calling the library, so nothing else moves the splits: the abort
 * returns only if it ends them, with ncclRemoteError. */
static void abort_parent_of_splits(int with_holder) {
  const char* where = with_holder ? "its MPI turn" : "MPI_Comm_split";
  MPI_Comm ds, dh = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_SELF, &ds);
  ncclConfig_t cfg = nonblocking();
  ncclComm_t parent = NULL, holder = NULL, s[2] = {NULL, NULL};
  ncclResult_t res = mpincclCommInitMPI(&parent, ds, &cfg);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  EXPECT(poll_ready(parent) == ncclSuccess);
  if (with_holder) {
    MPI_Comm_dup(MPI_COMM_SELF, &dh);
    EXPECT(mpincclCommInitMPI(&holder, dh, &cfg) == ncclInProgress);
  }
  for (int i = 0; i < 2; i++) EXPECT(ncclCommSplit(parent, 0, 0, &s[i], NULL) == ncclInProgress);
  usleep(200000); /* (the first split reaches its wait) */
  aborter_t a = {{parent, NULL}, ncclInternalError, 0};
  pthread_t t;
  int done = aborted_within_10s(&a, &t);
  if (!done)
    fprintf(stderr, "[world %d] ncclCommAbort of a parent whose split waits for %s still waits after 10 s\n",
            world_rank, where);
  EXPECT(done);
  EXPECT(poll_for(holder, 30) == ncclSuccess); /* (which lets a stuck abort end) */
  for (int i = 0; i < 2; i++) {
    ncclResult_t state = poll_for(s[i], 30);
    if (state != ncclRemoteError)
      fprintf(stderr, "[world %d] ncclCommAbort of a parent, split %d waiting for %s: %s\n", world_rank, i,
              i ? "its turn" : where, ncclGetErrorString(state));
    EXPECT(state == ncclRemoteError);
    EXPECT_OK(state == ncclInProgress ? ncclCommAbort(s[i]) : ncclCommDestroy(s[i]));
  }
  pthread_join(t, NULL);
  EXPECT(a.res == ncclSuccess);
  if (holder) EXPECT_OK(ncclCommDestroy(holder));
  if (dh != MPI_COMM_NULL) MPI_Comm_free(&dh);
  MPI_Comm_free(&ds);
}

static int destroyed; /* atomic */

/* Reports a destroy that never returns, and ends the process. */
static void* destroy_watch(void* arg) {
  (void)arg;
  for (int ms = 0; ms < 20000 && !__atomic_load_n(&destroyed, __ATOMIC_ACQUIRE); ms++) usleep(1000);
  if (__atomic_load_n(&destroyed, __ATOMIC_ACQUIRE)) return NULL;
  fprintf(stderr,
          "[world %d] ncclCommDestroy of a parent right after two non-blocking splits of it still waits "
          "after 20 s\n",
          world_rank);
  _exit(1);
}

/* ncclCommDestroy of a parent right after two non-blocking splits of it,
 * on the main thread: the destroy waits for the splits, whose MPI work
 * (their bootstrap split, MPI_Comm_split) only this thread may do, so it
 * must do it while it waits; the children are then made. */
static void destroy_parent_of_splits(void) {
  MPI_Comm d;
  MPI_Comm_dup(MPI_COMM_WORLD, &d);
  ncclConfig_t cfg = nonblocking();
  ncclComm_t parent = NULL, s[2] = {NULL, NULL};
  ncclResult_t res = mpincclCommInitMPI(&parent, d, &cfg);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  EXPECT(poll_ready(parent) == ncclSuccess);
  for (int i = 0; i < 2; i++) EXPECT(ncclCommSplit(parent, 0, world_rank, &s[i], NULL) == ncclInProgress);
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, destroy_watch, NULL) == 0);
  EXPECT_OK(ncclCommDestroy(parent));
  __atomic_store_n(&destroyed, 1, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  for (int i = 0; i < 2; i++) {
    EXPECT(poll_for(s[i], 30) == ncclSuccess);
    expect_shape(s[i], world_size, world_rank);
    EXPECT_OK(ncclCommDestroy(s[i]));
  }
  MPI_Comm_free(&d);
}

static void* destroy_off_main(void* comm) {
  EXPECT_OK(ncclCommDestroy(*(ncclComm_t*)comm));
  return NULL;
}

/* The destroy of a split of an MPI-made communicator on another thread: its
 * MPI communicator is freed on the main thread (here at its next poll), not
 * on the destroying one. */
static void destroy_split_off_main(void) {
  ncclComm_t parent = NULL, child = NULL;
  EXPECT_OK(mpincclCommInitMPI(&parent, MPI_COMM_WORLD, NULL));
  EXPECT_OK(ncclCommSplit(parent, 0, world_rank, &child, NULL));
  expect_shape(child, world_size, world_rank);
  long frees = __atomic_load_n(&comm_frees, __ATOMIC_RELAXED);
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, destroy_off_main, &child) == 0);
  pthread_join(t, NULL);
  EXPECT(__atomic_load_n(&comm_frees, __ATOMIC_RELAXED) == frees); /* not on that thread */
  ncclResult_t async = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(parent, &async));
  EXPECT(async == ncclSuccess);
  /* by the poll: the split's MPI communicator and the library's duplicate of it */
  EXPECT(__atomic_load_n(&comm_frees, __ATOMIC_RELAXED) == frees + 2);
  EXPECT_OK(ncclCommDestroy(parent));
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("1 2 3 4");
    return 0;
  }
  main_thread = pthread_self();
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (provided != MPI_THREAD_FUNNELED) {
    if (world_rank == 0) printf("test_funneled: MPI provides thread level %d, not FUNNELED: skipped\n", provided);
    MPI_Finalize();
    return 77;
  }
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "30", 1);
  long before = calls_main;
  test_nonblocking_rank();
  test_group_two_ranks();
  test_mpi_made();
  test_two_nocolor_splits();
  test_nocolor_two_per_process();
  test_abort_pending();
  test_abort_waiting_turn();
  abort_parent_of_splits(1);
  abort_parent_of_splits(0);
  destroy_parent_of_splits();
  destroy_split_off_main();
  long lib_calls = calls_main - before, off = __atomic_load_n(&calls_off_main, __ATOMIC_RELAXED);
  if (off)
    fprintf(stderr, "[world %d] %ld MPI calls off the main thread, the first %s\n", world_rank, off, first_off_main);
  EXPECT(off == 0);
  EXPECT(lib_calls > 0); /* the wrappers saw the library's calls */
  long all_off = 0;
  MPI_Allreduce(&off, &all_off, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  return mpi_test_finish(world_rank,
                         "test_funneled: %d ranks, %ld MPI calls on the main thread (rank 0), %ld off it (all), ",
                         world_size, lib_calls, all_off);
}
