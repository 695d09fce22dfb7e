/*
 * test_comm_local_bootstrap.c - test_comm_local's tests of the bootstrap
 * under the communicators: a failed split's timeout reported to its caller,
 * an id used in a forked child, a fork while another thread holds the
 * channel, the collectives among threads, and the rendezvous's records
 * freed once their ids are done.
 */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/channel.h"
#include "core/clock.h"
#include "core/error.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "test_comm_local.h"

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

/* Waits up to secs for the child pid; its status, or -1 (then killed). */
static int child_wait(pid_t pid, int secs) {
  int status = 0;
  for (int i = 0; i < secs * 100; i++) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    usleep(10000);
  }
  kill(pid, SIGKILL); /* (blocked for good) */
  waitpid(pid, &status, 0);
  return -1;
}

/* Holds the channel's lock for 300 ms, as the rendezvous thread or a
 * creation holds it at times; says when it has it. */
static int channel_held;

static void hold_channel(void* arg) {
  (void)arg;
  __atomic_store_n(&channel_held, 1, __ATOMIC_RELEASE);
  usleep(300000);
}

static void* channel_holder(void* arg) {
  mpn_chan_locked(hold_channel, arg);
  return NULL;
}

/* A fork() while another thread holds the channel's lock: the child's
 * calls into the library return (a communicator of one rank is made).
 * The child used to inherit the lock held, by a thread it does not have,
 * and blocked for ever in its first call. */
START_TEST(fork_while_channel_held) {
  use_local_bootstrap();
  channel_held = 0;
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, channel_holder, NULL), 0);
  while (!__atomic_load_n(&channel_held, __ATOMIC_ACQUIRE)) usleep(1000);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res == ncclSuccess) res = ncclCommInitRank(&comm, 1, id, 0);
    if (res == ncclSuccess) res = ncclCommDestroy(comm);
    _exit(res == ncclSuccess ? 0 : 1);
  }
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  int status = child_wait(pid, 20);
  ck_assert_msg(status != -1, "the child of fork() blocked in the library for 20 s");
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's communicator failed (status 0x%x)", status);
}
END_TEST

/* A communicator of one rank from the id, made and destroyed. */
static void rendezvous_of_one(const mpn_bootstrap_id_t* id) {
  mpn_bootstrap_t* b = NULL;
  ck_assert_int_eq(mpn_bootstrap_rendezvous(id, 1, 0, NULL, &b), ncclSuccess);
  mpn_bootstrap_destroy(b);
}

/* The records held once those of earlier tests run in this process
 * (CK_FORK=no) have gone: a failed id's record goes at the first sweep
 * after its linger (1 s here), which would otherwise come within the
 * caller's counts.  Records of rounds still open stay, and count alike. */
static int records_settled(void) {
  if (mpn_bootstrap_records_held() == 0) return 0;
  usleep(1200000);
  mpn_bootstrap_id_t id;
  ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
  rendezvous_of_one(&id); /* (a rendezvous sweeps the records) */
  return mpn_bootstrap_records_held();
}

/* The process serving ids keeps a record of each while a round of it is
 * open, or while its failure lingers (MPINCCL_BOOTSTRAP_LINGER, 1 s here),
 * and frees it then: ids used up hold nothing.  An id used again still
 * gives a context of its own.  A record of each id used to stay for the
 * process's life. */
START_TEST(records_freed) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_LINGER", "1");
  int start = records_settled();
  mpn_bootstrap_id_t id;
  for (int i = 0; i < 20; i++) {
    ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
    rendezvous_of_one(&id);
  }
  mpn_bootstrap_t* b[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) ck_assert_int_eq(mpn_bootstrap_rendezvous(&id, 1, 0, NULL, &b[i]), ncclSuccess);
  ck_assert(b[0]->key != b[1]->key);
  for (int i = 0; i < 2; i++) mpn_bootstrap_destroy(b[i]);
  ck_assert_int_eq(mpn_bootstrap_records_held(), start);
  /* A failed id: its record answers a late caller, then goes. */
  ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
  mpn_bootstrap_rendezvous_fail(&id, 2, 1, mpn_error_set(NULL, ncclSystemError, "test: no device"));
  ck_assert_int_eq(mpn_bootstrap_records_held(), start + 1);
  ck_assert_int_eq(mpn_bootstrap_rendezvous(&id, 2, 0, NULL, &b[0]), ncclRemoteError);
  ck_assert_int_eq(mpn_bootstrap_records_held(), start + 1);
  usleep(1200000);
  rendezvous_of_one(&id); /* (the id serves a new round once its linger is over) */
  ck_assert_int_eq(mpn_bootstrap_records_held(), start);
  unsetenv("MPINCCL_BOOTSTRAP_LINGER");
  use_local_bootstrap();
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
  if (a->rank == root)
    for (int i = 0; i < 1000; i++) big[i] = i * 7;
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

/* A message to a context's rank that went away here (a peer's failure
 * notice that comes after the rank's destroy) is dropped, not kept in the
 * process's mailbox for good. */
typedef struct {
  mpn_bootstrap_id_t id;
  int rank;
  mpn_bootstrap_t* b;
} join_arg_t;

static void* join_thread(void* p) {
  join_arg_t* a = p;
  if (mpn_bootstrap_rendezvous(&a->id, 2, a->rank, NULL, &a->b) != ncclSuccess) a->b = NULL;
  return NULL;
}

START_TEST(late_notice_dropped) {
  use_local_bootstrap();
  join_arg_t a[2];
  pthread_t t[2];
  mpn_bootstrap_id_t id;
  ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
  for (int i = 0; i < 2; i++) {
    a[i] = (join_arg_t){.id = id, .rank = i};
    pthread_create(&t[i], NULL, join_thread, &a[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  ck_assert(a[0].b && a[1].b);
  uint64_t key = a[0].b->key;
  mpn_bootstrap_destroy(a[1].b);
  ncclResult_t res = mpn_error_set(NULL, ncclSystemError, "test: rank 0 fails");
  ck_assert_int_eq(mpn_bootstrap_fail(a[0].b, res), ncclSystemError);
  ck_assert_int_eq(mpn_chan_noticed(key, 1), -1); /* dropped */
  mpn_bootstrap_destroy(a[0].b);
}
END_TEST

/* An answer of the rendezvous to an earlier call that nobody took (its
 * caller gave up before it came) is not taken for the answer to the rank's
 * next call with the id (here one that failed, status -1). */
START_TEST(stale_answer_dropped) {
  use_local_bootstrap();
  mpn_bootstrap_id_t id;
  ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
  size_t len = mpn_bootstrap_table_bytes(1);
  char* stale = malloc(len);
  ck_assert_ptr_nonnull(stale);
  memset(stale, 0xff, len);
  mpn_endpoint_t self = mpn_chan_self();
  ck_assert_int_eq(mpn_chan_send(id.key, MPN_RANK_SERVICE, 0, &self, mpn_tag_table(0x1234), stale, len), ncclSuccess);
  free(stale);
  mpn_bootstrap_t* b = NULL;
  ck_assert_int_eq(mpn_bootstrap_rendezvous(&id, 1, 0, NULL, &b), ncclSuccess);
  ck_assert_int_eq(b->nranks, 1);
  mpn_bootstrap_destroy(b);
}
END_TEST

/* The answer to a call whose caller gave up waiting for it (rendezvous.c,
 * rendezvous_withdraw: mpn_chan_forget_tag) is dropped when it comes, and
 * one already there goes; messages of the rank under other tags stay. */
START_TEST(late_answer_dropped) {
  use_local_bootstrap();
  mpn_bootstrap_id_t id;
  ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
  mpn_endpoint_t self = mpn_chan_self();
  char answer[16] = "table";
  int given_up = mpn_tag_table(0x1234), other = mpn_tag_table(0x5678);
  ck_assert_int_eq(mpn_chan_send(id.key, MPN_RANK_SERVICE, 0, &self, given_up, answer, sizeof(answer)), ncclSuccess);
  ck_assert_int_eq(mpn_chan_send(id.key, MPN_RANK_SERVICE, 0, &self, other, answer, sizeof(answer)), ncclSuccess);
  ck_assert_int_eq(mpn_chan_flush(id.key, mpn_chan_deadline(), NULL), ncclSuccess);
  mpn_chan_progress();
  ck_assert_int_eq(mpn_chan_held(id.key, 0), 2);
  mpn_chan_forget_tag(id.key, 0, given_up); /* the one there goes */
  ck_assert_int_eq(mpn_chan_held(id.key, 0), 1);
  ck_assert_int_eq(mpn_chan_send(id.key, MPN_RANK_SERVICE, 0, &self, given_up, answer, sizeof(answer)), ncclSuccess);
  ck_assert_int_eq(mpn_chan_flush(id.key, mpn_chan_deadline(), NULL), ncclSuccess);
  mpn_chan_progress();
  ck_assert_int_eq(mpn_chan_held(id.key, 0), 1); /* a later one is dropped on arrival */
  char got[16] = "";
  ck_assert_int_eq(mpn_chan_recv(id.key, 0, MPN_RANK_SERVICE, other, got, sizeof(got), mpn_chan_deadline(), NULL),
                   ncclSuccess); /* the other tag's is still there */
  ck_assert_str_eq(got, "table");
  ck_assert_int_eq(mpn_chan_held(id.key, 0), 0);
}
END_TEST

/* A rank that went away (mpn_chan_forget) stays forgotten however many
 * answers are given up after it (mpn_chan_forget_tag): the two are kept in
 * rings of their own, each of the latest 64. */
START_TEST(gone_rank_outlives_given_up_answers) {
  use_local_bootstrap();
  mpn_bootstrap_id_t id;
  ck_assert_int_eq(mpn_bootstrap_id_create(&id), ncclSuccess);
  mpn_endpoint_t self = mpn_chan_self();
  char notice[16] = "notice";
  mpn_chan_forget(id.key, 1);
  for (int k = 0; k < 100; k++) mpn_chan_forget_tag(id.key, 0, mpn_tag_table(k));
  ck_assert_int_eq(mpn_chan_send(id.key, 0, 1, &self, mpn_tag_table(0x77), notice, sizeof(notice)), ncclSuccess);
  ck_assert_int_eq(mpn_chan_send(id.key, MPN_RANK_SERVICE, 0, &self, mpn_tag_table(99), notice, sizeof(notice)),
                   ncclSuccess); /* the latest answer given up: dropped too */
  ck_assert_int_eq(mpn_chan_send(id.key, MPN_RANK_SERVICE, 0, &self, mpn_tag_table(0), notice, sizeof(notice)),
                   ncclSuccess); /* given up 100 answers ago: out of its ring, so kept */
  ck_assert_int_eq(mpn_chan_flush(id.key, mpn_chan_deadline(), NULL), ncclSuccess);
  mpn_chan_progress();
  ck_assert_int_eq(mpn_chan_held(id.key, 1), 0);
  ck_assert_int_eq(mpn_chan_held(id.key, 0), 1);
  char got[16] = "";
  ck_assert_int_eq(
      mpn_chan_recv(id.key, 0, MPN_RANK_SERVICE, mpn_tag_table(0), got, sizeof(got), mpn_chan_deadline(), NULL),
      ncclSuccess);
  ck_assert_str_eq(got, "notice");
}
END_TEST

/* The process that made an id whose rendezvous failed goes on answering
 * late callers while a rank some caller claimed was not answered
 * (MPINCCL_BOOTSTRAP_LINGER, here 20 s), inside its own creation; an abort
 * of that creation ends the wait at once.  It used to ignore the abort,
 * and ncclCommAbort, which joins the creation, took the whole 20 s. */
START_TEST(linger_ends_at_abort) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_LINGER", "20");
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(NULL, 3, id, 1), ncclInvalidArgument); /* rank 1 tells the rendezvous */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRankConfig(&comm, 3, id, 0, &cfg);
  ck_assert(res == ncclSuccess || res == ncclInProgress);
  ck_assert_ptr_nonnull(comm);
  usleep(300000); /* its answer came: it lingers for rank 2 */
  uint64_t t0 = mpn_clock_now_ns();
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
  double secs = (double)(mpn_clock_now_ns() - t0) / 1e9;
  ck_assert_msg(secs < 5, "ncclCommAbort took %.1f s", secs);
}
END_TEST

void comm_local_add_bootstrap(TCase* tc) {
  tcase_add_test(tc, bootstrap_collectives_threads);
  tcase_add_test(tc, split_nocolor_failure_text);
  tcase_add_test(tc, forked_child_is_another_process);
  tcase_add_test(tc, fork_while_channel_held);
  tcase_add_test(tc, records_freed);
  tcase_add_test(tc, late_notice_dropped);
  tcase_add_test(tc, stale_answer_dropped);
  tcase_add_test(tc, late_answer_dropped);
  tcase_add_test(tc, gone_rank_outlives_given_up_answers);
  tcase_add_test(tc, linger_ends_at_abort);
}
