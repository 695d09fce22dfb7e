/*
 * test_comm_mpi.c - communicators over MPI processes (run by tests/run-test
 * under mpirun with 1 to 4 ranks): unique id + MPI_Bcast over all of
 * MPI_COMM_WORLD, a subset of the processes while the others do MPI work of
 * their own, two ranks per process from threads and from one thread in a
 * group, split, the MPI_Comm extension, non-blocking creation and splits,
 * and refused rendezvous and groups.  Without a GPU the communicators are host-only.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/comm.h"
#include "core/param.h"
#include "mpi_test.h"
#include "mpinccl.h"

static int world_rank, world_size;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "world", world_rank, "last error: ")
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

static void expect_shape(ncclComm_t comm, int nranks, int rank) {
  int n = -1, r = -1, dev = -9;
  EXPECT_OK(ncclCommCount(comm, &n));
  EXPECT_OK(ncclCommUserRank(comm, &r));
  EXPECT_OK(ncclCommCuDevice(comm, &dev));
  EXPECT(n == nranks);
  EXPECT(r == rank);
  EXPECT(dev >= -1);
}

/* Unique id from world rank 0, broadcast with MPI, one rank per process. */
static void test_world(void) {
  ncclUniqueId id;
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = NULL;
  EXPECT_OK(ncclCommInitRank(&comm, world_size, id, world_rank));
  expect_shape(comm, world_size, world_rank);
  EXPECT(comm->topo.n_same_host == world_size);
  EXPECT(comm->topo.n_same_process == 1);
  for (int p = 0; p < world_size; p++) EXPECT(comm->topo.ranks[p].world == p);
  /* Split by parity with reversed keys, and one rank without a color. */
  int color = world_rank == 3 ? NCCL_SPLIT_NOCOLOR : world_rank % 2;
  ncclComm_t sub = (ncclComm_t)0x1;
  EXPECT_OK(ncclCommSplit(comm, color, -world_rank, &sub, NULL));
  if (color == NCCL_SPLIT_NOCOLOR) {
    EXPECT(sub == NULL);
  } else {
    int members = 0, below = 0;
    for (int p = 0; p < world_size; p++)
      if (p != 3 && p % 2 == color) {
        members++;
        below += p > world_rank;
      }
    expect_shape(sub, members, below);
    /* Split of a split. */
    ncclComm_t self = NULL;
    EXPECT_OK(ncclCommSplit(sub, world_rank, 0, &self, NULL));
    expect_shape(self, 1, 0);
    EXPECT_OK(ncclCommDestroy(self));
    MPI_Comm none;
    EXPECT(mpincclCommGetMPIComm(sub, &none) == ncclInvalidUsage);
    EXPECT_OK(ncclCommDestroy(sub));
  }
  EXPECT_OK(ncclCommFinalize(comm));
  EXPECT_OK(ncclCommDestroy(comm));
}

/* Only the odd world ranks make a communicator; the others reduce meanwhile. */
static void test_subset(void) {
  if (world_size < 2) return;
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  int hrank, hsize;
  MPI_Comm_rank(half, &hrank);
  MPI_Comm_size(half, &hsize);
  if (world_rank % 2 == 1) {
    ncclUniqueId id;
    if (hrank == 0) EXPECT_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, half);
    ncclComm_t comm;
    EXPECT_OK(ncclCommInitRank(&comm, hsize, id, hsize - 1 - hrank));
    expect_shape(comm, hsize, hsize - 1 - hrank);
    EXPECT_OK(ncclCommDestroy(comm));
  } else {
    int sum = 0, one = 1;
    for (int i = 0; i < 50; i++) MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, half);
    EXPECT(sum == hsize);
  }
  MPI_Comm_free(&half);
}

typedef struct {
  ncclUniqueId id;
  int nranks, rank;
  ncclComm_t comm;
  ncclResult_t res;
} thread_arg_t;

static void* init_thread(void* p) {
  thread_arg_t* a = p;
  a->res = ncclCommInitRank(&a->comm, a->nranks, a->id, a->rank);
  return NULL;
}

/* Two ranks per process: one thread each, then one thread in a group. */
static void test_two_ranks_per_process(void) {
  int n = 2 * world_size;
  ncclUniqueId id;
  if (world_rank == world_size - 1) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, world_size - 1, MPI_COMM_WORLD);
  thread_arg_t a[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    a[i] = (thread_arg_t){.id = id, .nranks = n, .rank = i * world_size + world_rank};
    pthread_create(&t[i], NULL, init_thread, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++) {
    EXPECT(a[i].res == ncclSuccess);
    if (a[i].res != ncclSuccess) continue;
    expect_shape(a[i].comm, n, a[i].rank);
    EXPECT(a[i].comm->topo.n_same_process == 2);
    int other = (1 - i) * world_size + world_rank;
    EXPECT(a[i].comm->transport[other] == 1 /* local */);
  }
  /* Split across processes and threads: rank parity. */
  ncclComm_t sub[2];
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommSplit(a[i].comm, a[i].rank % 2, 0, &sub[i], NULL));
  EXPECT_OK(ncclGroupEnd());
  for (int i = 0; i < 2; i++) {
    expect_shape(sub[i], (n + 1 - a[i].rank % 2) / 2, a[i].rank / 2);
    EXPECT_OK(ncclCommDestroy(sub[i]));
    EXPECT_OK(ncclCommDestroy(a[i].comm));
  }
  /* One thread, two ranks, inside a group. */
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comms[2];
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommInitRank(&comms[i], n, id, 2 * world_rank + i));
  EXPECT_OK(ncclGroupEnd());
  for (int i = 0; i < 2; i++) {
    expect_shape(comms[i], n, 2 * world_rank + i);
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
}

/* The MPI_Comm extension, its split and the way back to MPI. */
static void test_mpi_comm(void) {
  MPI_Comm reversed;
  MPI_Comm_split(MPI_COMM_WORLD, 0, world_size - world_rank, &reversed);
  int mrank;
  MPI_Comm_rank(reversed, &mrank);
  ncclComm_t comm;
  EXPECT_OK(mpincclCommInitMPI(&comm, reversed, NULL));
  expect_shape(comm, world_size, mrank);
  MPI_Comm back;
  EXPECT_OK(mpincclCommGetMPIComm(comm, &back));
  EXPECT(back == reversed);
  ncclComm_t sub;
  EXPECT_OK(ncclCommSplit(comm, mrank / 2, mrank, &sub, NULL));
  MPI_Comm subm;
  EXPECT_OK(mpincclCommGetMPIComm(sub, &subm));
  int sr, ss, n, r;
  MPI_Comm_rank(subm, &sr);
  MPI_Comm_size(subm, &ss);
  EXPECT_OK(ncclCommCount(sub, &n));
  EXPECT_OK(ncclCommUserRank(sub, &r));
  EXPECT(sr == r && ss == n && r == mrank % 2);
  EXPECT_OK(ncclCommDestroy(sub));
  EXPECT_OK(ncclCommDestroy(comm));
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_NULL, NULL) == ncclInvalidArgument);
  MPI_Comm_free(&reversed);
}

/* config.blocking = 0 over MPI: in progress, then success. */
static void test_nonblocking(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm;
  ncclResult_t res = mpincclCommInitMPI(&comm, MPI_COMM_WORLD, &cfg);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  ncclResult_t state;
  do {
    EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  } while (state == ncclInProgress);
  EXPECT(state == ncclSuccess);
  expect_shape(comm, world_size, world_rank);
  EXPECT_OK(ncclCommDestroy(comm));
}

/* A non-blocking communicator of every process, from a unique id, ready. */
static ncclComm_t nonblocking_world(void) {
  ncclUniqueId id;
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t parent = NULL;
  ncclResult_t res = ncclCommInitRankConfig(&parent, world_size, id, world_rank, &cfg);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  ncclResult_t state;
  do EXPECT_OK(ncclCommGetAsyncError(parent, &state));
  while (state == ncclInProgress);
  EXPECT(state == ncclSuccess);
  return parent;
}

/* Two non-blocking splits of one parent issued back to back run in the
 * order of the calls on every process (they used to take the parent's
 * split numbers in either order and time out about half the time); and a
 * group may not create blocking and non-blocking communicators together. */
static void test_nonblocking_splits(void) {
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "60", 1); /* (a stop of every process for seconds must not time out) */
  EXPECT_OK(mpn_params_reload());
  ncclComm_t parent = nonblocking_world();
  for (int it = 0; it < 8; it++) {
    ncclComm_t all = NULL, alone = NULL; /* everyone in reverse order; one comm per rank */
    EXPECT(ncclCommSplit(parent, 0, -world_rank, &all, NULL) != ncclInvalidUsage);
    EXPECT(ncclCommSplit(parent, world_rank, 0, &alone, NULL) != ncclInvalidUsage);
    ncclResult_t a, b;
    do EXPECT_OK(ncclCommGetAsyncError(all, &a));
    while (a == ncclInProgress);
    do EXPECT_OK(ncclCommGetAsyncError(alone, &b));
    while (b == ncclInProgress);
    EXPECT(a == ncclSuccess && b == ncclSuccess);
    if (a == ncclSuccess) expect_shape(all, world_size, world_size - 1 - world_rank);
    if (b == ncclSuccess) expect_shape(alone, 1, 0);
    EXPECT_OK(ncclCommDestroy(all));
    EXPECT_OK(ncclCommDestroy(alone));
  }
  ncclComm_t mixed[2] = {NULL, NULL};
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclCommSplit(parent, 0, world_rank, &mixed[0], NULL)); /* non-blocking, as its parent */
  ncclConfig_t blocking = NCCL_CONFIG_INITIALIZER;
  blocking.blocking = 1;
  EXPECT_OK(mpincclCommInitMPI(&mixed[1], MPI_COMM_WORLD, &blocking));
  EXPECT(ncclGroupEnd() == ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(NULL), "blocking and non-blocking") != NULL);
  EXPECT(mixed[0] == NULL && mixed[1] == NULL);
  EXPECT_OK(ncclCommDestroy(parent));
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  EXPECT_OK(mpn_params_reload());
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Two MPI-made communicators split in one group (their splits run on
 * threads): below MPI_THREAD_MULTIPLE this deadlocked, and two splits of
 * communicators over one MPI communicator could pair their MPI_Comm_split
 * calls wrongly.  Each child's MPI rank must be its rank. */
static void test_split_two_mpi(void) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  for (int same = 0; same < 2; same++) {
    ncclComm_t parent[2] = {NULL, NULL};
    EXPECT_OK(mpincclCommInitMPI(&parent[0], MPI_COMM_WORLD, NULL));
    EXPECT_OK(mpincclCommInitMPI(&parent[1], same ? MPI_COMM_WORLD : dup, NULL));
    for (int it = 0; it < 4; it++) {
      ncclComm_t child[2] = {NULL, NULL};
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclCommSplit(parent[0], 0, world_rank, &child[0], NULL));
      EXPECT_OK(ncclCommSplit(parent[1], 0, -world_rank, &child[1], NULL));
      EXPECT_OK(ncclGroupEnd());
      for (int k = 0; k < 2 && child[k]; k++) {
        int want = k == 0 ? world_rank : world_size - 1 - world_rank, mine = -1;
        MPI_Comm m = MPI_COMM_NULL;
        expect_shape(child[k], world_size, want);
        EXPECT_OK(mpincclCommGetMPIComm(child[k], &m));
        if (m != MPI_COMM_NULL) MPI_Comm_rank(m, &mine);
        EXPECT(mine == want);
        EXPECT_OK(ncclCommDestroy(child[k]));
      }
    }
    EXPECT_OK(ncclCommDestroy(parent[0]));
    EXPECT_OK(ncclCommDestroy(parent[1]));
  }
  /* Two communicators from one MPI communicator in one group: their MPI
   * collectives used to interleave differently on different processes
   * (MPI_ERR_TRUNCATE).  Blocking, then non-blocking back to back. */
  for (int blocking = 1; blocking >= 0; blocking--) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclComm_t two[2] = {NULL, NULL};
    if (blocking) EXPECT_OK(ncclGroupStart());
    for (int k = 0; k < 2; k++) {
      ncclResult_t res = mpincclCommInitMPI(&two[k], MPI_COMM_WORLD, &cfg);
      EXPECT(res == ncclSuccess || (!blocking && res == ncclInProgress));
    }
    if (blocking) EXPECT_OK(ncclGroupEnd());
    for (int k = 0; k < 2 && two[k]; k++) {
      ncclResult_t state;
      do EXPECT_OK(ncclCommGetAsyncError(two[k], &state));
      while (state == ncclInProgress);
      EXPECT(state == ncclSuccess);
      expect_shape(two[k], world_size, world_rank);
      EXPECT_OK(ncclCommDestroy(two[k]));
    }
  }
  MPI_Comm_free(&dup);
}

/* ncclCommAbort of a child whose non-blocking split its peers never join
 * returns at once: it used to wait out MPINCCL_BOOTSTRAP_TIMEOUT (600 s
 * here; the run's own timeout catches a wait). */
static void test_abort_pending_split(void) {
  if (world_size < 2) return;
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "600", 1);
  EXPECT_OK(mpn_params_reload());
  ncclComm_t parent = nonblocking_world();
  ncclResult_t res;
  if (world_rank == 0) {
    ncclComm_t child = NULL;
    res = ncclCommSplit(parent, 0, 0, &child, NULL);
    EXPECT(res == ncclInProgress || res == ncclSuccess);
    EXPECT_OK(ncclCommAbort(child));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_OK(ncclCommAbort(parent)); /* rank 0's split numbers now differ */
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  EXPECT_OK(mpn_params_reload());
}

/* Callers that disagree all get ncclInvalidArgument, and nobody hangs. */
static void test_disagreement(void) {
  if (world_size < 2) return;
  ncclUniqueId id;
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = NULL;
  int nranks = world_rank == 1 ? world_size + 1 : world_size;
  EXPECT(ncclCommInitRank(&comm, nranks, id, world_rank) == ncclInvalidArgument);
  EXPECT(comm == NULL);
  EXPECT(strstr(ncclGetLastError(NULL), "disagree on nranks") != NULL);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A unique id whose root is no rank of this job (an id of another, larger
 * job, or damaged bytes) is refused on every rank with ncclInvalidArgument;
 * MPI was asked to reach that rank before, which aborted the job. */
static void test_foreign_id(void) {
  ncclUniqueId id;
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  mpn_bootstrap_id_t inner;
  memcpy(&inner, id.internal, sizeof(inner));
  inner.root.world = world_size + 5;
  memcpy(id.internal, &inner, sizeof(inner));
  ncclComm_t comm = (ncclComm_t)0x1;
  EXPECT(ncclCommInitRank(&comm, world_size, id, world_rank) == ncclInvalidArgument);
  EXPECT(comm == (ncclComm_t)0x1 || comm == NULL);
  EXPECT(strstr(ncclGetLastError(NULL), "outside this job's") != NULL);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* The last rank's creation from a fresh id fails at its own call (fail,
 * which returns its code), and tells the others: they get ncclRemoteError
 * with its text (why) at once, not ncclTimeout at the deadline (60 s here). */
static void expect_creation_told(ncclResult_t (*fail)(ncclUniqueId id), ncclResult_t code, const char* why) {
  if (world_size < 2) return;
  ncclUniqueId id;
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "60", 1);
  EXPECT_OK(mpn_params_reload());
  ncclComm_t comm = NULL;
  EXPECT((world_rank == world_size - 1 ? fail(id) : ncclCommInitRank(&comm, world_size, id, world_rank)) ==
         (world_rank == world_size - 1 ? code : ncclRemoteError));
  EXPECT(comm == NULL);
  EXPECT(strstr(ncclGetLastError(NULL), why) != NULL);
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  EXPECT_OK(mpn_params_reload());
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Without a place for the communicator. */
static ncclResult_t init_null_newcomm(ncclUniqueId id) { return ncclCommInitRank(NULL, world_size, id, world_rank); }

/* In a group with a refused call: ncclGroupEnd discards the creation. */
static ncclResult_t init_in_failed_group(ncclUniqueId id) {
  ncclComm_t comm = NULL;
  char buf[8];
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclCommInitRank(&comm, world_size, id, world_rank));
  EXPECT(ncclSend(buf, 1, (ncclDataType_t)99, 0, NULL, NULL) == ncclInvalidArgument);
  ncclResult_t res = ncclGroupEnd();
  EXPECT(comm == NULL);
  return res;
}

/* A window registration refused by one rank's own argument fails on every
 * rank at once, and the collective after it still pairs up (host only:
 * every rank refuses here, for want of a GPU, but rank 0 before the
 * collective part, where it used to return alone). */
static void test_window_refusal(void) {
  ncclComm_t comm = NULL;
  EXPECT_OK(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL));
  if (comm == NULL) return;
  void* fake = (void*)(uintptr_t)0x10000;
  /* A rank that returned alone would leave the others to pair its next
   * call with this one and, in the end, to time out (not a bound on time:
   * this machine may stop every process for seconds at once). */
  for (int k = 0; k < 3; k++) {
    ncclWindow_t w = (ncclWindow_t)(uintptr_t)1;
    ncclResult_t got = ncclCommWindowRegister(comm, world_rank == 0 && k == 0 ? NULL : fake, 4096, &w, 0);
    EXPECT(got != ncclSuccess && got != ncclTimeout);
    EXPECT(w == NULL);
    if (world_rank == 0 && k == 0) EXPECT(strstr(ncclGetLastError(comm), "buff is NULL") != NULL);
  }
  /* A NULL window is nothing to deregister (as NCCL: success, no
   * collective); handles that are no window are refused by every rank. */
  EXPECT_OK(ncclCommWindowDeregister(comm, NULL));
  ncclWindow_t other = (ncclWindow_t)(uintptr_t)0x20000;
  EXPECT(ncclCommWindowDeregister(comm, world_rank == 0 ? other : (ncclWindow_t)fake) == ncclInvalidArgument);
  EXPECT_OK(ncclCommDestroy(comm));
}

/* A set-up that timed out because a peer came late: every rank gets
 * ncclTimeout, and the late peer's part of the abandoned MPI collective,
 * which MPI cannot cancel, lands in buffers the library kept, not in memory
 * handed out since (desk review, twenty-fourth session: blocks allocated
 * after the failure changed). Two ranks: it takes 4 s. */
static void test_late_peer(void) {
  if (world_size != 2) return;
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "1", 1);
  EXPECT_OK(mpn_params_reload());
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (world_rank == 1) sleep(3);
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, dup, NULL) == ncclTimeout);
  EXPECT(comm == NULL);
  enum { BLOCKS = 256 };
  unsigned char* block[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    block[i] = malloc(16 + 8 * (size_t)(i % 32));
    memset(block[i], 0xa5, 16 + 8 * (size_t)(i % 32));
  }
  MPI_Barrier(MPI_COMM_WORLD);   /* the late rank has joined and given up too */
  for (int k = 0; k < 20; k++) { /* let MPI progress the stranded collectives */
    int flag;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    usleep(10000);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  int changed = 0;
  for (int i = 0; i < BLOCKS; i++) {
    for (size_t j = 0; j < 16 + 8 * (size_t)(i % 32); j++) changed += block[i][j] != 0xa5;
    free(block[i]);
  }
  EXPECT(changed == 0);
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  EXPECT_OK(mpn_params_reload());
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("1 2 3 4");
    return 0;
  }
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  test_world();
  test_subset();
  test_two_ranks_per_process();
  test_mpi_comm();
  test_nonblocking();
  test_nonblocking_splits();
  test_split_two_mpi();
  test_abort_pending_split();
  test_disagreement();
  test_foreign_id();
  expect_creation_told(init_null_newcomm, ncclInvalidArgument, "newcomm is NULL");
  expect_creation_told(init_in_failed_group, ncclInvalidArgument, "comm is NULL");
  test_window_refusal();
  test_late_peer();
  return mpi_test_finish(world_rank, "test_comm_mpi: %d ranks, ", world_size);
}
