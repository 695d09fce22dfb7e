/*
 * test_ucx_edges.c - edges of the UCX proxy, 2 ranks, UCX forced and
 * eager protocol only (UCX_RNDV_THRESH=inf):
 *  - a receive posted after its multi-fragment message has fully arrived,
 *    which UCX completes inside the posting call;
 *  - a communicator destroyed while thousands of its sends are still
 *    queued for the proxy, three times: queued commands must not run
 *    against closed endpoints (both once crashed the proxy: use after
 *    free, a UCX assertion);
 *  - a peer declared lost (what the watchdog does when a same-host peer's
 *    process is gone): a receive waiting for it and a later send fail
 *    instead of waiting forever, and the communicator reports it;
 *  - a peer that went away after its message came, before the receive
 *    started: the receive takes it (one whose message never came fails);
 *  - a peer that aborts its communicator: a receive waiting for it fails,
 *    and the communicator reports ncclRemoteError naming that rank;
 *  - a malformed notice before that abort (a kind or a sender unknown, a
 *    mismatch report unknown, too short, too long): dropped, and the abort
 *    after it still heard (the first one ended the notice receive);
 *  - closes of two communicators' endpoints from two threads at once
 *    (ranks of one process destroyed by their threads): the second closer's
 *    request was wiped by the first, and the proxy crashed on it;
 *  - a "peer lost" call that reaches the proxy with the close of its
 *    communicator while other commands wait for their trigger: it waited
 *    among them, the close passed it by, and it ran after the close had
 *    returned (on freed peers, in a destroy); each command, whether the
 *    proxy ran it or dropped it at the close, leaves its caller's count of
 *    commands in flight (mpn_ucx_cmd_t pending);
 *  - a call on the proxy thread whose caller gave up waiting (the proxy
 *    held past MPINCCL_BOOTSTRAP_TIMEOUT): it stayed queued and ran later,
 *    after the caller had freed what it works on (mpn_ucx_region_free
 *    unmapping a freed region);
 *  - the watchdog's question whether an operation with a peer is pending
 *    (mpn_ucx_proxy_pending), answered while the proxy sweeps its armed
 *    commands and the first of them starts: the proxy's list of armed
 *    commands was half relinked then, and a command with the peer armed
 *    behind that first one went unseen (the answer was "nothing").
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "mpi_test.h"
#include "mpinccl.h"
#include "ucx/net.h"
#include "ucx/net_comm.h"
#include "ucx/proxy.h"

static int rank;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "rank", rank, NULL)

static int wait_flag(uint64_t* flag) {
  for (int i = 0; i < 30000; i++) {
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE)) return 0;
    usleep(1000);
  }
  return -1;
}

static void late_receive(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  size_t bytes = 200000;
  unsigned char* b = calloc(bytes, 1);
  uint64_t flag = 0;
  int error = 0;
  if (rank == 1) {
    for (size_t i = 0; i < bytes; i++) b[i] = (unsigned char)(i * 7 + 3);
    EXPECT(mpn_ucx_host_send(comm, 0, b, bytes, &flag, 1, &error) == ncclSuccess);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    usleep(300000); /* the whole message is there before the receive */
    EXPECT(mpn_ucx_host_recv(comm, 1, b, bytes, &flag, 1, &error) == ncclSuccess);
  }
  EXPECT(wait_flag(&flag) == 0);
  EXPECT(error == 0);
  size_t bad = 0;
  for (size_t i = 0; rank == 0 && i < bytes; i++) bad += b[i] != (unsigned char)(i * 7 + 3);
  EXPECT(bad == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);
  free(b);
}

static void destroy_with_queued_sends(void) {
  enum { K = 2000 };
  static uint64_t flags[K];
  static char b[8];
  int error = 0;
  for (int round = 0; round < 3; round++) {
    ncclComm_t comm = NULL;
    EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
    if (comm == NULL) return;
    memset(flags, 0, sizeof(flags));
    for (int i = 0; rank == 0 && i < K; i++) mpn_ucx_host_send(comm, 1, b, 8, &flags[i], 1, &error);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess); /* fails or cancels what is left, no crash */
    MPI_Barrier(MPI_COMM_WORLD);
  }
}

static void peer_lost(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  char b[64] = {0};
  uint64_t got = 0, sent = 0;
  int rerr = 0, serr = 0;
  if (rank == 0) { /* rank 1 never sends: only losing it ends the receive */
    EXPECT(mpn_ucx_host_recv(comm, 1, b, sizeof(b), &got, 1, &rerr) == ncclSuccess);
    usleep(100000);
    EXPECT(__atomic_load_n(&got, __ATOMIC_ACQUIRE) == 0);
    mpn_ucx_peer_lost(comm, 1);
    EXPECT(wait_flag(&got) == 0);
    EXPECT(rerr == ncclRemoteError);
    EXPECT(mpn_ucx_host_send(comm, 1, b, sizeof(b), &sent, 1, &serr) == ncclSuccess);
    EXPECT(wait_flag(&sent) == 0);
    EXPECT(serr == ncclRemoteError);
    ncclResult_t async = ncclSuccess;
    EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
    EXPECT(async == ncclRemoteError);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT((rank == 0 ? ncclCommAbort(comm) : ncclCommDestroy(comm)) == ncclSuccess);
}

/* A peer that went away (found unreachable or gone) after its message came,
 * before this rank's receive of it started (a stream behind its host, a
 * sender that flushed and closed its communicator, then exited): the
 * receive still takes it, from UCX's unexpected messages, which needs no
 * endpoint; a receive whose message never came fails as before. */
static void peer_went_after_message(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  char b[64] = "sent before going", got_b[64] = {0}, none[64] = {0};
  uint64_t sent = 0, got = 0, never = 0;
  int serr = 0, rerr = 0, nerr = 0;
  if (rank == 1) {
    EXPECT(mpn_ucx_host_send(comm, 0, b, sizeof(b), &sent, 1, &serr) == ncclSuccess);
    EXPECT(wait_flag(&sent) == 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    usleep(300000); /* the message is among UCX's unexpected ones */
    mpn_ucx_peer_lost(comm, 1);
    EXPECT(mpn_ucx_host_recv(comm, 1, got_b, sizeof(got_b), &got, 1, &rerr) == ncclSuccess);
    EXPECT(wait_flag(&got) == 0);
    EXPECT(rerr == 0);
    EXPECT(strcmp(got_b, "sent before going") == 0);
    EXPECT(mpn_ucx_host_recv(comm, 1, none, sizeof(none), &never, 1, &nerr) == ncclSuccess);
    EXPECT(wait_flag(&never) == 0);
    EXPECT(nerr == ncclRemoteError);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT((rank == 0 ? ncclCommAbort(comm) : ncclCommDestroy(comm)) == ncclSuccess);
}

static void peer_aborted(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  char b[64] = {0};
  uint64_t got = 0;
  int rerr = 0;
  if (rank == 1) /* rank 0 never sends: only its abort ends the receive */
    EXPECT(mpn_ucx_host_recv(comm, 0, b, sizeof(b), &got, 1, &rerr) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT(ncclCommAbort(comm) == ncclSuccess);
  } else {
    EXPECT(wait_flag(&got) == 0);
    EXPECT(rerr == ncclRemoteError);
    ncclResult_t async = ncclSuccess;
    for (int i = 0; i < 3000 && async == ncclSuccess; i++) {
      EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
      if (async == ncclSuccess) usleep(1000);
    }
    EXPECT(async == ncclRemoteError);
    EXPECT(strstr(ncclGetLastError(comm), "rank 0 aborted") != NULL);
    EXPECT(ncclCommAbort(comm) == ncclSuccess);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A notice's layout, as ucx/net_impl.h's notice_t. */
typedef struct {
  int32_t from, kind, came, unused;
  uint64_t expected, got;
} notice_like_t;

/* Rank 0 sends rank 1 bad[i]'s first bytes[i] bytes on the notice tag,
 * then aborts: rank 1 must drop the notice and still hear the abort
 * (rank 0's sends go in order on one endpoint). */
static void malformed_notice(const notice_like_t* bad, size_t bytes) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  if (rank == 0) {
    /* The communicator's 24-bit prefix (any tag's top bits), then the
     * receiver in bits 20 to 38 and message number 0 (notices.c, notice_tag). */
    uint64_t key = mpn_ucx_stage_tag(comm, 0, 0, 0, 0, 0) >> 40 << 40;
    uint64_t sent = 0;
    int err = 0;
    mpn_ucx_cmd_t cmd = {.kind = MPN_UCX_SEND,
                         .peer = mpn_ucx_comm_peer(comm, 1),
                         .buf = (void*)bad,
                         .bytes = bytes,
                         .tag = key | 1ull << 20,
                         .flag = &sent,
                         .value = 1,
                         .error = &err};
    EXPECT(cmd.peer != NULL && mpn_ucx_proxy_post(&cmd) == ncclSuccess);
    EXPECT(wait_flag(&sent) == 0 && err == 0);
    EXPECT(ncclCommAbort(comm) == ncclSuccess);
  } else {
    mpn_error_clear(); /* (an earlier step's text must not pass for this one's) */
    ncclResult_t async = ncclSuccess;
    for (int i = 0; i < 5000 && async == ncclSuccess; i++) {
      EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
      if (async == ncclSuccess) usleep(1000);
    }
    if (async != ncclRemoteError)
      fprintf(stderr, "[rank 1] after a notice of %zu bytes: %s\n", bytes, ncclGetErrorString(async));
    EXPECT(async == ncclRemoteError);
    EXPECT(strstr(ncclGetLastError(comm), "rank 0 aborted") != NULL);
    EXPECT(ncclCommAbort(comm) == ncclSuccess);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

static void malformed_notices(void) {
  static const notice_like_t bad[] = {
      {.from = 0, .kind = 9},            /* a kind unknown */
      {.from = 5, .kind = 1},            /* an abort of a rank that is no peer */
      {.from = 0, .kind = 2, .came = 7}, /* a mismatch report unknown */
      {.from = 0, .kind = 1},            /* an abort, cut short */
  };
  static notice_like_t longer[3] = {{.from = 0, .kind = 1}}; /* an abort, with more after it */
  for (int i = 0; i < 3; i++) malformed_notice(&bad[i], sizeof(bad[i]));
  malformed_notice(&bad[3], 8);
  malformed_notice(longer, sizeof(longer));
}

/* Two threads closing endpoint sets of different owners, over and over
 * (endpoints NULL: the proxy still reads each set it is given). */
static mpn_ucx_peer_t close_sets[2][2];

static void* close_loop(void* arg) {
  long i = (long)arg;
  for (int k = 0; k < 5000; k++) mpn_ucx_proxy_close(&close_sets[i], close_sets[i], 2);
  return NULL;
}

static void concurrent_closes(void) {
  ncclComm_t comm; /* starts the proxy */
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  pthread_t t[2];
  for (long i = 0; i < 2; i++) EXPECT(pthread_create(&t[i], NULL, close_loop, (void*)i) == 0);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

/* lost_call_at_close puts calls on the proxy thread that hold it, to order
 * its batches; each gives up after 10 s so that a wrong test fails, not hangs. */
static uint64_t close_returned;

static void wait_on_proxy(int (*ready)(void)) {
  for (int i = 0; i < 10000 && !ready(); i++) usleep(1000);
}

static int after_close(void) { return (int)__atomic_load_n(&close_returned, __ATOMIC_ACQUIRE); }

/* Holds the proxy until the close is asked for, so that the commands
 * posted meanwhile come to it in the close's batch. */
static void hold_until_close(void* started) {
  __atomic_store_n((int*)started, 1, __ATOMIC_RELEASE);
  wait_on_proxy(mpn_ucx_proxy_close_pending);
}

/* Armed before the lost call, it holds the proxy's sweep after the close
 * until the closer has looked at its peers. */
static void hold_until_returned(void* arg) {
  (void)arg;
  wait_on_proxy(after_close);
}

static void noop(void* arg) { (void)arg; }

/* The calls post_call posted that the proxy has not yet done with (each
 * counted before posting, as captured one-sided calls count theirs:
 * ucx/gnodes.c); the proxy takes 1 when it drops one too. */
static int calls_pending;

static void post_call(void (*fn)(void*), void* arg, const void* owner, const uint64_t* trigger, uint64_t* done) {
  mpn_ucx_cmd_t cmd = {.kind = MPN_UCX_CALL,
                       .owner = owner,
                       .fn = fn,
                       .arg = arg,
                       .flag = done,
                       .value = 1,
                       .pending = &calls_pending,
                       .trigger = trigger,
                       .trigger_value = 1,
                       .quiet = 1};
  __atomic_add_fetch(&calls_pending, 1, __ATOMIC_ACQ_REL);
  EXPECT(mpn_ucx_proxy_post(&cmd) == ncclSuccess);
}

static void lost_call_at_close(void) {
  ncclComm_t comm; /* starts the proxy */
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  static mpn_ucx_peer_t peers[2]; /* the closing communicator's, endpoints NULL */
  static const uint64_t never = 0;
  static uint64_t done[3];
  int started = 0;
  /* One of the communicator's commands waits for a trigger that never
   * comes: later commands queue behind it. */
  post_call(noop, NULL, peers, &never, &done[0]);
  post_call(hold_until_close, &started, NULL, NULL, &done[1]);
  while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) usleep(100);
  post_call(hold_until_returned, NULL, NULL, NULL, &done[2]);
  EXPECT(mpn_ucx_proxy_peer_lost(peers, &peers[0]) == ncclSuccess);
  mpn_ucx_proxy_close(peers, peers, 2);
  int failed_at_close = peers[0].failed; /* a destroy frees peers here */
  __atomic_store_n(&close_returned, 1, __ATOMIC_RELEASE);
  EXPECT(mpn_ucx_proxy_call(noop, NULL) == ncclSuccess); /* the proxy is past its sweep */
  EXPECT(peers[0].failed == failed_at_close);
  EXPECT(done[0] == 1 && done[1] == 1 && done[2] == 1);
  EXPECT(__atomic_load_n(&calls_pending, __ATOMIC_ACQUIRE) == 0); /* the one dropped at the close too */
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

static int call_released;

static int released(void) { return __atomic_load_n(&call_released, __ATOMIC_ACQUIRE); }

static void hold_until_released(void* started) {
  __atomic_store_n((int*)started, 1, __ATOMIC_RELEASE);
  wait_on_proxy(released);
}

static void mark(void* ran) { __atomic_store_n((int*)ran, 1, __ATOMIC_RELEASE); }

/* The proxy is held past the caller's deadline: the caller gets an error,
 * and the call must then never run (its argument may be gone). */
static void abandoned_call(void) {
  ncclComm_t comm; /* starts the proxy */
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  static uint64_t done;
  int started = 0, ran = 0;
  post_call(hold_until_released, &started, NULL, NULL, &done);
  while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) usleep(100);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "1", 1);
  EXPECT(mpn_params_reload() == ncclSuccess);
  EXPECT(mpn_ucx_proxy_call(mark, &ran) != ncclSuccess); /* gives up after 1 s */
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  EXPECT(mpn_params_reload() == ncclSuccess);
  __atomic_store_n(&call_released, 1, __ATOMIC_RELEASE);
  EXPECT(mpn_ucx_proxy_call(noop, NULL) == ncclSuccess); /* the proxy is past the given-up call */
  EXPECT(__atomic_load_n(&ran, __ATOMIC_ACQUIRE) == 0);
  EXPECT(done == 1);
  EXPECT(__atomic_load_n(&calls_pending, __ATOMIC_ACQUIRE) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

static int pending_answer = -1, pending_asking;

static void* ask_pending(void* peer) {
  __atomic_store_n(&pending_asking, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&pending_answer, mpn_ucx_proxy_pending(peer), __ATOMIC_RELEASE);
  return NULL;
}

/* Armed, in this order: a receive (no peer, a tag nobody sends) whose
 * trigger comes while the proxy is held, and a call with peer whose trigger
 * never comes; the question comes in the next batch, so that the receive
 * starts (in flight) in the sweep that answers it.  The question gives up
 * after half a second (then its answer is 1): the proxy is let go well
 * before. */
static void pending_in_sweep(void) {
  ncclComm_t comm; /* starts the proxy */
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  static mpn_ucx_peer_t peer; /* (never connected) */
  static const uint64_t never = 0;
  static uint64_t go, done[3], buf;
  static int error[2];
  mpn_ucx_cmd_t recv = {.kind = MPN_UCX_RECV,
                        .owner = &peer,
                        .buf = &buf,
                        .bytes = sizeof(buf),
                        .tag = ~0ull,
                        .flag = &done[0],
                        .value = 1,
                        .error = &error[0],
                        .trigger = &go,
                        .trigger_value = 1,
                        .quiet = 1};
  mpn_ucx_cmd_t with_peer = {.kind = MPN_UCX_CALL,
                             .owner = &peer,
                             .peer = &peer,
                             .fn = noop,
                             .flag = &done[1],
                             .value = 1,
                             .error = &error[1],
                             .trigger = &never,
                             .trigger_value = 1,
                             .quiet = 1};
  EXPECT(mpn_ucx_proxy_post(&recv) == ncclSuccess);
  EXPECT(mpn_ucx_proxy_post(&with_peer) == ncclSuccess);
  int started = 0;
  __atomic_store_n(&call_released, 0, __ATOMIC_RELEASE);
  post_call(hold_until_released, &started, NULL, NULL, &done[2]);
  while (!__atomic_load_n(&started, __ATOMIC_ACQUIRE)) usleep(100);
  __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
  pthread_t asker;
  EXPECT(pthread_create(&asker, NULL, ask_pending, &peer) == 0);
  while (!__atomic_load_n(&pending_asking, __ATOMIC_ACQUIRE)) usleep(100);
  usleep(100000); /* (its call queued) */
  __atomic_store_n(&call_released, 1, __ATOMIC_RELEASE);
  pthread_join(asker, NULL);
  EXPECT(pending_answer == 1);
  mpn_ucx_proxy_close(&peer, NULL, 0); /* cancels the receive, drops the call */
  EXPECT(done[0] == 1 && done[1] == 1 && done[2] == 1);
  EXPECT(__atomic_load_n(&calls_pending, __ATOMIC_ACQUIRE) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("2");
    return 0;
  }
  setenv("UCX_RNDV_THRESH", "inf", 1);
  setenv("MPINCCL_TRANSPORT", "ucx", 1);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  late_receive();
  destroy_with_queued_sends();
  peer_lost();
  peer_went_after_message();
  peer_aborted();
  malformed_notices();
  concurrent_closes();
  lost_call_at_close();
  abandoned_call();
  pending_in_sweep();
  return mpi_test_finish(rank, "test_ucx_edges: ");
}
