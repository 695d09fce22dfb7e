/*
 * test_bootstrap_mpi.c - the bootstrap module between processes (no CUDA):
 * rendezvous, allgather of several sizes, broadcast, barrier, tagged
 * messages that arrive before they are received, split, contexts from an
 * MPI communicator, many contexts alive at once, (MPI_THREAD_MULTIPLE) a
 * rendezvous served by the helper thread of a process that does not join,
 * a rank that fails: before a rendezvous (and the new attempt after it,
 * also served by that helper thread), or leaving a context's collectives,
 * a rendezvous thread that cannot start, and a fork() beside it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/error.h"
#include "core/param.h"
#include "mpi_test.h"

static int world_rank, world_size;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "world", world_rank, NULL)
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

/* A stand-in for the library's thread starts (Makefile.am: --wrap): fails
 * the next one, with EAGAIN, while thread_fails is set; with slow_failure
 * set, it says so (failing_start_in) and takes 300 ms first. */
int __real_mpn_proc_thread_detached(void* (*fn)(void*), void* arg);
int __wrap_mpn_proc_thread_detached(void* (*fn)(void*), void* arg);
static int thread_fails, slow_failure, failing_start_in;
int __wrap_mpn_proc_thread_detached(void* (*fn)(void*), void* arg) {
  if (!__atomic_exchange_n(&thread_fails, 0, __ATOMIC_ACQ_REL)) return __real_mpn_proc_thread_detached(fn, arg);
  if (slow_failure) {
    __atomic_store_n(&failing_start_in, 1, __ATOMIC_RELEASE);
    usleep(300000);
  }
  return EAGAIN;
}

static void exercise(mpn_bootstrap_t* b) {
  int n = b->nranks, me = b->rank;
  for (size_t size = 1; size <= 65536; size *= 16) {
    unsigned char* buf = malloc(size * (size_t)n);
    memset(buf + size * (size_t)me, me + 1, size);
    EXPECT_OK(mpn_bootstrap_allgather(b, buf, size));
    for (int r = 0; r < n; r++) EXPECT(buf[size * (size_t)r + size - 1] == (unsigned char)(r + 1));
    free(buf);
  }
  double v = me == n - 1 ? 3.25 : 0;
  EXPECT_OK(mpn_bootstrap_bcast(b, &v, sizeof(v), n - 1));
  EXPECT(v == 3.25);
  EXPECT_OK(mpn_bootstrap_barrier(b));
  /* Sends first, to every peer, with two tags; receives in the other order. */
  for (int p = 0; p < n; p++) {
    int msg[2] = {me, p};
    EXPECT_OK(mpn_bootstrap_send(b, p, 1, msg, sizeof(msg)));
    msg[1] = -p;
    EXPECT_OK(mpn_bootstrap_send(b, p, 2, msg, sizeof(msg)));
  }
  for (int p = n - 1; p >= 0; p--) {
    int msg[2];
    EXPECT_OK(mpn_bootstrap_recv(b, p, 2, msg, sizeof(msg)));
    EXPECT(msg[0] == p && msg[1] == -me);
    EXPECT_OK(mpn_bootstrap_recv(b, p, 1, msg, sizeof(msg)));
    EXPECT(msg[0] == p && msg[1] == me);
  }
}

/* Callers of one id from world rank 1: caller i is rank i of late_nranks[i]. */
static mpn_bootstrap_id_t late_id;
static const int late_nranks[3] = {3, 2, 3};
static ncclResult_t late_res[3];
static char late_error[3][256];

static void* late_caller(void* p) {
  int i = (int)(intptr_t)p;
  mpn_bootstrap_t* b = NULL;
  late_res[i] = mpn_bootstrap_rendezvous(&late_id, late_nranks[i], i, NULL, &b);
  snprintf(late_error[i], sizeof(late_error[i]), "%s", mpn_error_last(NULL));
  mpn_bootstrap_destroy(b);
  return NULL;
}

/* An id whose creator (world rank 0) does not join is served by its helper
 * thread.  Callers that disagree on nranks fail, and one that comes after
 * the failure was answered gets the error too: the helper thread used to
 * leave as soon as the failure was answered, and the late caller waited out
 * MPINCCL_BOOTSTRAP_TIMEOUT for an answer nobody would send (ncclTimeout).
 * The late caller calls once the others returned, and the failed id
 * answers late callers for an hour (MPINCCL_BOOTSTRAP_LINGER), not 2 s: on
 * a loaded machine, or one whose processes all stopped for seconds at once
 * (seen: 16 s), the late caller came after 2 s and started a new round. */
static void test_late_caller_unjoined(int provided) {
  if (world_size < 2 || provided != MPI_THREAD_MULTIPLE) return;
  setenv("MPINCCL_BOOTSTRAP_LINGER", "3600", 1);
  EXPECT_OK(mpn_params_reload());
  if (world_rank == 0) EXPECT_OK(mpn_bootstrap_id_create(&late_id));
  MPI_Bcast(&late_id, sizeof(late_id), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (world_rank == 1) {
    pthread_t t[2];
    for (intptr_t i = 0; i < 2; i++) pthread_create(&t[i], NULL, late_caller, (void*)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    late_caller((void*)(intptr_t)2);
    for (int i = 0; i < 3; i++) { /* (the first two may come in either order) */
      EXPECT(late_res[i] == ncclInvalidArgument);
      EXPECT(strstr(late_error[i], "disagree on nranks (3 and 2)") != NULL ||
             strstr(late_error[i], "disagree on nranks (2 and 3)") != NULL);
    }
    if (late_res[2] != ncclInvalidArgument) fprintf(stderr, "[world 1] the late caller: %s\n", late_error[2]);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* world rank 0 calls nothing of the library meanwhile */
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
  EXPECT_OK(mpn_params_reload());
}

/* Every rank but world rank 0 (the id's creator, which does not join)
 * meets at id, which must succeed; then the default timeout again. */
static void join_without_world_0(const mpn_bootstrap_id_t* id, const char* what) {
  if (world_rank > 0) {
    mpn_bootstrap_t* b = NULL;
    ncclResult_t res = mpn_bootstrap_rendezvous(id, world_size - 1, world_rank - 1, NULL, &b);
    EXPECT(res == ncclSuccess);
    if (res != ncclSuccess) fprintf(stderr, "[world %d] %s: %s\n", world_rank, what, mpn_error_last(NULL));
    if (b) {
      EXPECT(b->rank == world_rank - 1 && b->nranks == world_size - 1);
      mpn_bootstrap_destroy(b);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD); /* world rank 0 calls nothing of the library meanwhile */
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "60", 1);
  EXPECT_OK(mpn_params_reload());
}

/* An id whose creator does not join is served however late its callers
 * come: here after twice MPINCCL_BOOTSTRAP_TIMEOUT (2 s).  Each caller's
 * own wait is bounded from its own call.  The helper thread used to drop
 * the id at the creator's deadline, and the callers then timed out. */
static void test_unjoined_served_late(int provided) {
  if (world_size < 2 || provided != MPI_THREAD_MULTIPLE) return;
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "2", 1);
  EXPECT_OK(mpn_params_reload());
  mpn_bootstrap_id_t id;
  if (world_rank == 0) EXPECT_OK(mpn_bootstrap_id_create(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (world_rank > 0) sleep(4);
  join_without_world_0(&id, "the late rendezvous");
}

/* An id of world rank 0 made by another thread once a start of the
 * rendezvous thread is under way (one that fails). */
static mpn_bootstrap_id_t meanwhile_id;
static ncclResult_t meanwhile_res;

static void* create_meanwhile(void* arg) {
  (void)arg;
  while (!__atomic_load_n(&failing_start_in, __ATOMIC_ACQUIRE)) usleep(1000);
  meanwhile_res = mpn_bootstrap_id_create(&meanwhile_id);
  return NULL;
}

/* An id whose rendezvous thread could not start is refused
 * (ncclSystemError), and the next id of the process starts one, also one
 * made while the failing start was under way (it waits for the outcome):
 * its creator (world rank 0), which does not join, serves it.  The failed
 * start used to leave the thread counted as running, so no later id of the
 * process got one; and later an id made while a start was under way took
 * the thread for running, which then never started.  Either way its
 * callers timed out (MPINCCL_BOOTSTRAP_TIMEOUT, 5 s here).  Run first: no
 * rendezvous thread runs yet. */
static void test_service_thread_fails(int provided) {
  if (world_size < 2 || provided != MPI_THREAD_MULTIPLE) return;
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "5", 1);
  EXPECT_OK(mpn_params_reload());
  mpn_bootstrap_id_t id;
  if (world_rank == 0) {
    thread_fails = 1;
    EXPECT(mpn_bootstrap_id_create(&id) == ncclSystemError);
    EXPECT(strstr(mpn_error_last(NULL), "cannot start the rendezvous thread") != NULL);
    thread_fails = slow_failure = 1;
    pthread_t t;
    EXPECT(pthread_create(&t, NULL, create_meanwhile, NULL) == 0);
    EXPECT(mpn_bootstrap_id_create(&id) == ncclSystemError);
    pthread_join(t, NULL);
    slow_failure = 0;
    EXPECT(meanwhile_res == ncclSuccess);
    id = meanwhile_id;
  }
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  join_without_world_0(&id, "the rendezvous of the id made meanwhile");
}

/* What a child of fork() got from the library. */
typedef struct {
  ncclResult_t mpi_id, local;
  char text[256];
} fork_report_t;

static void forked_child(int fd) {
  fork_report_t r = {0};
  mpn_bootstrap_id_t id;
  r.mpi_id = mpn_bootstrap_id_create(&id);
  snprintf(r.text, sizeof(r.text), "%s", mpn_error_last(NULL));
  setenv("MPINCCL_BOOTSTRAP", "local", 1);
  r.local = mpn_params_reload();
  if (r.local == ncclSuccess) r.local = mpn_bootstrap_id_create(&id);
  mpn_bootstrap_t* b = NULL;
  if (r.local == ncclSuccess) r.local = mpn_bootstrap_rendezvous(&id, 1, 0, NULL, &b);
  mpn_bootstrap_destroy(b);
  ssize_t n = write(fd, &r, sizeof(r));
  _exit(n == (ssize_t)sizeof(r) ? 0 : 1); /* (no exit handler: MPI is the parent's) */
}

/* Waits up to 20 s for the child, then kills it; its report, or -1. */
static int fork_report_read(pid_t pid, int fd, fork_report_t* r) {
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 2000 && (done = waitpid(pid, &status, WNOHANG)) == 0; i++) usleep(10000);
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
  }
  return read(fd, r, sizeof(*r)) == (ssize_t)sizeof(*r) ? 0 : -1;
}

/* A fork() while the rendezvous thread runs (world rank 0 made an id it
 * does not join): the child, another process without its parent's MPI, is
 * refused an id over MPI at once (ncclInvalidUsage, saying why) and makes
 * one of its own with MPINCCL_BOOTSTRAP=local.  The child used to take its
 * parent's MPI for its own and its rendezvous thread for running, and made
 * an id nobody would serve; or, had the thread held the channel's lock as
 * it forked, it blocked for ever in its first call (test_comm_local's
 * fork_while_channel_held). */
static void test_fork_beside_service(int provided) {
  if (world_size < 2 || provided != MPI_THREAD_MULTIPLE) return;
  mpn_bootstrap_id_t id;
  if (world_rank == 0) {
    EXPECT_OK(mpn_bootstrap_id_create(&id));
    int fds[2];
    EXPECT(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) forked_child(fds[1]);
    close(fds[1]);
    fork_report_t r;
    int got = fork_report_read(pid, fds[0], &r);
    close(fds[0]);
    EXPECT(got == 0);
    if (got != 0) fprintf(stderr, "[world 0] the child of fork() blocked in the library for 20 s\n");
    if (got == 0) {
      EXPECT(r.mpi_id == ncclInvalidUsage && strstr(r.text, "child of fork()") != NULL);
      if (r.mpi_id != ncclInvalidUsage)
        fprintf(stderr, "[world 0] the child's id over MPI: %d \"%s\"\n", r.mpi_id, r.text);
      EXPECT(r.local == ncclSuccess);
    }
  }
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  join_without_world_0(&id, "the rendezvous of the id served beside the fork");
}

/* A rendezvous that failed (a rank that could not join) serves a new
 * attempt by all ranks MPINCCL_BOOTSTRAP_LINGER seconds after the last
 * caller (README, Errors), also when its creator (world rank 0) does not
 * join: its rendezvous thread used to leave once the failed round was
 * answered, and the new attempt timed out (MPINCCL_BOOTSTRAP_TIMEOUT, 5 s
 * here). */
static void test_unjoined_retry(int provided) {
  if (world_size < 3 || provided != MPI_THREAD_MULTIPLE) return;
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "5", 1);
  setenv("MPINCCL_BOOTSTRAP_LINGER", "1", 1);
  EXPECT_OK(mpn_params_reload());
  mpn_bootstrap_id_t id;
  if (world_rank == 0) EXPECT_OK(mpn_bootstrap_id_create(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  int n = world_size - 1, rank = world_rank - 1;
  mpn_bootstrap_t* b = NULL;
  if (rank == n - 1) {
    usleep(300000); /* the others' hellos are in: the failure ends their round */
    mpn_bootstrap_rendezvous_fail(&id, n, rank, mpn_error_set(NULL, ncclSystemError, "test: no device"));
  } else if (rank >= 0) {
    EXPECT(mpn_bootstrap_rendezvous(&id, n, rank, NULL, &b) == ncclRemoteError);
    EXPECT(b == NULL);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  usleep(1500000); /* MPINCCL_BOOTSTRAP_LINGER after the last caller */
  if (rank >= 0) {
    ncclResult_t res = mpn_bootstrap_rendezvous(&id, n, rank, NULL, &b);
    EXPECT(res == ncclSuccess);
    if (res != ncclSuccess) fprintf(stderr, "[world %d] the new attempt: %s\n", world_rank, mpn_error_last(NULL));
    if (b) EXPECT_OK(mpn_bootstrap_barrier(b));
    mpn_bootstrap_destroy(b);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* world rank 0 calls nothing of the library meanwhile */
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "60", 1);
  EXPECT_OK(mpn_params_reload());
}

/* The thread's last error names the failed rank (who, a format of its
 * rank) and its reason, and came well before the deadline (60 s). */
static void expect_told(const char* who, int rank, const char* reason, double t0) {
  char want[96];
  snprintf(want, sizeof(want), who, rank);
  EXPECT(strstr(mpn_error_last(NULL), want) != NULL);
  EXPECT(strstr(mpn_error_last(NULL), reason) != NULL);
  EXPECT(MPI_Wtime() - t0 < 30);
}

/* A rank that fails before a collective its peers join leaves the context
 * (mpn_bootstrap_fail): the peers' collective stops at once with
 * ncclRemoteError naming it and why, not at the deadline (60 s here), and
 * every later collective of the context fails at once on every rank. */
static void test_rank_leaves(void) {
  if (world_size < 2) return;
  mpn_bootstrap_t* c = NULL;
  EXPECT_OK(mpn_bootstrap_from_mpi(MPI_COMM_WORLD, NULL, &c));
  if (c == NULL) return;
  int leaver = c->nranks - 1;
  double t0 = MPI_Wtime();
  if (c->rank == leaver) {
    ncclResult_t res = mpn_error_set(NULL, ncclSystemError, "test: out of memory at rank %d", c->rank);
    EXPECT(mpn_bootstrap_fail(c, res) == ncclSystemError);
    EXPECT(strstr(mpn_error_last(NULL), "test: out of memory") != NULL); /* kept */
  } else {
    int* all = calloc((size_t)c->nranks, sizeof(int));
    EXPECT(mpn_bootstrap_allgather(c, all, sizeof(int)) == ncclRemoteError);
    expect_told("rank %d failed", leaver, "test: out of memory", t0);
    free(all);
  }
  t0 = MPI_Wtime();
  EXPECT(mpn_bootstrap_barrier(c) == (c->rank == leaver ? ncclInvalidUsage : ncclRemoteError));
  EXPECT(strstr(mpn_error_last(NULL), "left the communicator's set-up collectives") != NULL);
  EXPECT(MPI_Wtime() - t0 < 30);
  mpn_bootstrap_destroy(c);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A rank that fails before it joins a rendezvous tells it
 * (mpn_bootstrap_rendezvous_fail): the others get ncclRemoteError naming
 * it and why, not ncclTimeout at the deadline (60 s here). */
static void test_rendezvous_fail(void) {
  if (world_size < 2) return;
  mpn_bootstrap_id_t id;
  if (world_rank == 0) EXPECT_OK(mpn_bootstrap_id_create(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  int failing = world_size - 1;
  double t0 = MPI_Wtime();
  if (world_rank == failing) {
    mpn_bootstrap_rendezvous_fail(&id, world_size, world_rank,
                                  mpn_error_set(NULL, ncclInvalidArgument, "test: config refused"));
    EXPECT(strstr(mpn_error_last(NULL), "test: config refused") != NULL); /* kept */
  } else {
    mpn_bootstrap_t* b = NULL;
    EXPECT(mpn_bootstrap_rendezvous(&id, world_size, world_rank, NULL, &b) == ncclRemoteError);
    EXPECT(b == NULL);
    expect_told("rank %d failed before it could join", failing, "test: config refused", t0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A rank that gives up its wait for the rendezvous (an abort) takes its
 * hello back (rendezvous_withdraw).  Its hello last, so the round completes
 * with it as it gives up: the others get their tables, and a notice in the
 * new context's first collective names it.  Its hello first: the open round
 * fails, and the others get ncclRemoteError from the rendezvous.  Either
 * way at once, not ncclTimeout at the deadline (60 s here). */
static void test_rendezvous_withdraw(int hello_last) {
  if (world_size < 2) return;
  mpn_bootstrap_id_t id;
  if (world_rank == 0) EXPECT_OK(mpn_bootstrap_id_create(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  int leaver = world_size - 1;
  double t0 = MPI_Wtime();
  mpn_bootstrap_t* b = NULL;
  if (world_rank == leaver) {
    static const volatile int aborted = 1;
    if (hello_last) usleep(300000); /* the others' hellos are in */
    EXPECT(mpn_bootstrap_rendezvous(&id, world_size, world_rank, &aborted, &b) == ncclRemoteError);
    EXPECT(b == NULL);
    EXPECT(strstr(mpn_error_last(NULL), "aborted while waiting for the rendezvous") != NULL); /* kept */
  } else if (hello_last) {
    EXPECT_OK(mpn_bootstrap_rendezvous(&id, world_size, world_rank, NULL, &b));
    int* all = calloc((size_t)world_size, sizeof(int));
    if (b) EXPECT(mpn_bootstrap_allgather(b, all, sizeof(int)) == ncclRemoteError);
    expect_told("rank %d failed", leaver, "aborted while waiting for the rendezvous", t0);
    free(all);
    mpn_bootstrap_destroy(b);
  } else {
    usleep(300000); /* the leaver's hello is in, and taken back */
    EXPECT(mpn_bootstrap_rendezvous(&id, world_size, world_rank, NULL, &b) == ncclRemoteError);
    EXPECT(b == NULL);
    expect_told("rank %d left before the rendezvous was complete", leaver, "aborted", t0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("1 2 3 4");
    return 0;
  }
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "60", 1);
  test_service_thread_fails(provided);

  mpn_bootstrap_id_t id;
  if (world_rank == 0) EXPECT_OK(mpn_bootstrap_id_create(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  EXPECT(id.flags & MPN_BOOTSTRAP_ID_MPI);
  mpn_bootstrap_t* b = NULL;
  /* Reverse order: rank world_size-1 arrives first. */
  usleep(1000 * (world_size - world_rank));
  EXPECT_OK(mpn_bootstrap_rendezvous(&id, world_size, world_size - 1 - world_rank, NULL, &b));
  EXPECT(b && b->eps[b->rank].world == world_rank);
  exercise(b);

  /* Split into singletons and pairs, exercised concurrently with the parent. */
  mpn_bootstrap_t *pairs = NULL, *none = (mpn_bootstrap_t*)0x1;
  EXPECT_OK(mpn_bootstrap_split(b, b->rank / 2, b->rank, NULL, &pairs));
  EXPECT_OK(mpn_bootstrap_split(b, -1, 0, NULL, &none));
  EXPECT(none == NULL);
  EXPECT(pairs->rank == b->rank % 2);
  exercise(pairs);
  exercise(b);

  /* A context from an MPI communicator: rank = MPI rank. */
  mpn_bootstrap_t* m = NULL;
  EXPECT_OK(mpn_bootstrap_from_mpi(MPI_COMM_WORLD, NULL, &m));
  EXPECT(m->rank == world_rank && m->nranks == world_size);
  exercise(m);

  /* The same id serves a second rendezvous once the first is done. */
  mpn_bootstrap_t* again = NULL;
  EXPECT_OK(mpn_bootstrap_rendezvous(&id, world_size, world_rank, NULL, &again));
  EXPECT(again && again->key != b->key);
  exercise(again);

  mpn_bootstrap_destroy(again);
  mpn_bootstrap_destroy(m);
  mpn_bootstrap_destroy(pairs);
  mpn_bootstrap_destroy(b);
  test_fork_beside_service(provided);
  test_late_caller_unjoined(provided);
  test_unjoined_served_late(provided);
  test_unjoined_retry(provided);
  test_rank_leaves();
  test_rendezvous_fail();
  test_rendezvous_withdraw(1);
  test_rendezvous_withdraw(0);
  return mpi_test_finish(world_rank, "test_bootstrap_mpi: %d ranks, ", world_size);
}
