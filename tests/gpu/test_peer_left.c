/*
 * test_peer_left.c - two processes of one host: rank 1 ends its
 * communicators normally (ncclCommDestroy), finalizes MPI and exits, while
 * rank 0 keeps its communicators past its own MPI_Finalize (MPI serves the
 * set-up only).  On the communicator where every message and signal of
 * rank 0 was matched, the watchdog must take rank 1's exit for a normal end,
 * as NCCL would: no error through ncclCommGetAsyncError, and only a later
 * call naming rank 1 is refused (ncclRemoteError).  On a second
 * communicator rank 0 still waits for a message rank 1 never sent: that
 * is a failure, reported (ncclRemoteError), and the stream let go.  On a
 * third the two ranks never exchanged anything (no pair, no record of an
 * end): nothing of rank 0's waits for rank 1, so no error either, and a
 * later call naming it is refused.  On a fourth, rank 0 queued a receive
 * in a group before rank 1's exit and ends the group after the watchdog
 * found it: whether the launch is refused or waits in a pair made then,
 * it is reported and the stream let go, never a hang.  On a fifth, where
 * every message and signal matched (a normal end), a group that another
 * thread opened before the exit holds a wait for one more signal than
 * rank 1 sent, and ends once the watchdog took rank 1's end for a normal
 * one: that launch counts on more than its record, so it is reported and
 * the stream let go (it waited for good, unreported: the watchdog never
 * looked at such a peer again).  (A group of its own: in the fourth's,
 * the refusal of the receive would keep the wait from being launched.)  On a
 * sixth, rank 1 sends a small message rank 0 has not asked for yet (it
 * goes through rank 0's inbox, in a pair block rank 0 made) and two
 * signals, then ends: afterwards rank 0's waits for exactly those two
 * signals pass, and its receive takes that message, as in NCCL (both were
 * refused: "ended its communicator"), while a wait for a third signal and
 * a second receive are still refused (ncclRemoteError), and the
 * communicator reports no error.  The seventh is the same, but rank 1 made
 * its pairs, so the block holding rank 0's inbox and signals was rank 1's
 * memory, freed at its end: the waits for its signals still pass (they
 * read nothing), its message is refused (src/p2p/left.c says why).
 * Prints one line per rank ending in "ok" or "FAIL".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h" /* (the library's headers before the harness's globals) */
#include "core/proc.h"
#include "p2p/eager.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"

#include "harness.h"
#include "pattern.h"

/* SMALL: the sixth and seventh communicators' messages, well within an inbox slot (MPINCCL_EAGER_MAX). */
enum { BYTES = 4096, SMALL = 256, WATCHDOG_MS = 20 };

typedef struct {
  int pid;
  uint64_t start_time;
} proc_t;

/* A send and a receive each way, and a signal each way, on c. */
static void exchange(ncclComm_t c, cudaStream_t s, char* buf, int peer) {
  ncclWaitSignalDesc_t one = {1, peer, 0, 0};
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(buf, BYTES, ncclInt8, peer, c, s));
  EXPECT_OK(ncclRecv(buf + BYTES, BYTES, ncclInt8, peer, c, s));
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclSignal(peer, 0, 0, 0, c, s));
  EXPECT_OK(ncclWaitSignal(1, &one, c, s));
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
}

/* The fifth communicator's group, on a thread of its own (a thread has one
 * group open at a time): opened and given its wait at once, ended when the
 * main thread says (go). */
typedef struct {
  ncclComm_t comm;
  cudaStream_t stream;
  int device, peer;
  volatile int go;
  ncclResult_t queued, ended;
} late_group_t;

static void* late_group_main(void* arg) {
  late_group_t* g = arg;
  ncclWaitSignalDesc_t one_more = {1, g->peer, 0, 0}; /* (rank 1 sent one signal, waited for already) */
  cudaSetDevice(g->device);
  ncclResult_t res = ncclGroupStart();
  if (res == ncclSuccess) res = ncclWaitSignal(1, &one_more, g->comm, g->stream);
  __atomic_store_n(&g->queued, res, __ATOMIC_RELEASE);
  while (!__atomic_load_n(&g->go, __ATOMIC_ACQUIRE)) usleep(1000);
  g->ended = ncclGroupEnd();
  return NULL;
}

static ncclResult_t async_of(ncclComm_t c) {
  ncclResult_t a = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(c, &a));
  return a;
}

/* Whether stream s ran out of work within about 5 s: polled, so that a
 * stream left waiting fails the test ("still waiting") rather than hangs it. */
static int settled(cudaStream_t s, const char* what) {
  cudaError_t q = cudaErrorNotReady;
  for (int i = 0; i < 500 && (q = cudaStreamQuery(s)) == cudaErrorNotReady; i++) usleep(10000);
  if (q != cudaSuccess)
    printf("test_peer_left: rank %d: %s: %s\n", rank, what,
           q == cudaErrorNotReady ? "still waiting after 5 s" : cudaGetErrorString(q));
  return q == cudaSuccess;
}

/* The sixth and seventh communicators (kept[0], kept[1]): the rank that
 * maps their pairs first, whose memory holds their device blocks (the
 * inbox and the signals), rank 0 for the sixth, rank 1 for the seventh;
 * the signals rank 1 sends on each before its end. */
enum { SIXTH_SIGNALS = 2, SEVENTH_SIGNALS = 3 };

/* Offsets in the buffer small: what rank 1 sends on the sixth, on the
 * seventh and on comm; where rank 0 receives comm's message, then after
 * rank 1's end the sixth's (or the seventh's, were it not refused); where
 * receives refused would have gone. */
enum { SENT6 = 0, SENT7 = SMALL, SENT_COMM = 2 * SMALL, GOT_COMM = 2 * SMALL, GOT = 3 * SMALL, REFUSED = 4 * SMALL };

/*
 * The sixth and seventh communicators, before rank 1 ends them.  Each rank
 * maps the pairs of one first with a signal (rank 0 the sixth's, rank 1 the
 * seventh's); rank 0 maps the seventh's after, waiting for that signal
 * (a pair rank 0 never opened would go with rank 1's process).  Then rank 1
 * sends a small message on each, which rank 0 has not asked for yet: rank
 * 1 posts first, and its messages go through rank 0's inboxes where the two
 * ranks' kernels run at once (MPS, two GPUs), and on a time-sliced GPU too,
 * as its group holds a third message to rank 0, on comm (a group with one
 * peer of the GPU would delegate the copies to rank 0, and the sends wait
 * for them).  Then two signals on each.  Returns whether this rank's stream
 * ran out of work (else rank 1 must not destroy the communicators, whose
 * destroy would wait for it).
 */
static int leave_messages(ncclComm_t kept[2], cudaStream_t s, char* small, int peer) {
  EXPECT_OK(ncclSignal(peer, 0, 0, 0, kept[rank], s));
  int done = settled(s, "the signal that maps the pairs");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    pattern_fill(small + SENT6, SMALL, seed_of(1, 0, 6), s);
    pattern_fill(small + SENT7, SMALL, seed_of(1, 0, 7), s);
    pattern_fill(small + SENT_COMM, SMALL, seed_of(1, 0, 8), s);
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(small + SENT6, SMALL, ncclInt8, peer, kept[0], s)); /* received after this rank's exit */
    EXPECT_OK(ncclSend(small + SENT7, SMALL, ncclInt8, peer, kept[1], s)); /* refused then */
    EXPECT_OK(ncclSend(small + SENT_COMM, SMALL, ncclInt8, peer, comm, s));
    EXPECT_OK(ncclGroupEnd());
    for (int k = 0; k < 2; k++) {
      EXPECT_OK(ncclSignal(peer, 0, 0, 0, kept[0], s));
      EXPECT_OK(ncclSignal(peer, 0, 0, 0, kept[1], s));
    }
  } else {
    ncclWaitSignalDesc_t one = {1, peer, 0, 0};
    EXPECT_OK(ncclWaitSignal(1, &one, kept[1], s));
    EXPECT_OK(ncclRecv(small + GOT_COMM, SMALL, ncclInt8, peer, comm, s));
  }
  done = settled(s, "the messages and signals before rank 1's end") && done;
  EXPECT(done);
  if (rank == 0 && done) expect_pattern(small + GOT_COMM, SMALL, seed_of(1, 0, 8), "the message on comm beside them");
  MPI_Barrier(MPI_COMM_WORLD); /* (rank 0's pairs of the seventh are mapped: rank 1 may end) */
  return done;
}

/* Where the message rank 1 left on c lies, as rank 0's receive finds it
 * (src/p2p/left.c): whether in the inbox of a pair block rank 0 made, which
 * a receive takes. */
static int left_in_own_inbox(ncclComm_t c, const char* name, int peer) {
  mpn_pair_t* pairs[2];
  mpn_p2p_pairs_made(c, peer, pairs);
  const mpn_pair_t* pair = pairs[MPN_SIDE_RECV];
  int eager = pair ? mpn_pair_slot(pair, 1, 0)->side[MPN_SIDE_SEND].eager : MPN_EAGER_NONE;
  int inbox = eager == MPN_EAGER_SMALL || eager == MPN_EAGER_BIG;
  printf("test_peer_left: the message rank 1 left on the %s communicator: %s, in a pair block %s\n", name,
         inbox ? "through the inbox" : "not through the inbox",
         pair == NULL    ? "(none: no pair)"
         : pair->created ? "rank 0 made"
                         : "rank 1 made");
  return inbox && pair->created && pair->dflags;
}

/*
 * The sixth or seventh communicator (c, named name), after rank 1's normal
 * end, having sent `sent` signals, all but its last two waited for before
 * (the seventh's first): those two are waited for (one, then a group of
 * one and one more, refused, nothing of it enqueued, then one), a wait for
 * one more is refused, naming the counts.  Its message (of pattern seed)
 * is received, the data checked, where it lies in rank 0's own inbox (own:
 * the sixth), else refused; a receive of a second message is refused.  No
 * error on c.  Returns whether the stream ran out of work.
 */
static int take_left(ncclComm_t c, const char* name, int sent, int own, uint32_t seed, cudaStream_t s, char* small,
                     int peer) {
  EXPECT(__atomic_load_n(&c->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_LEFT);
  EXPECT(async_of(c) == ncclSuccess);
  char beyond[128];
  snprintf(beyond, sizeof(beyond),
           "rank 1 ended its communicator after sending %d signals on ctx 0; this wait needs %d", sent, sent + 1);
  ncclWaitSignalDesc_t one = {1, peer, 0, 0};
  EXPECT_OK(ncclWaitSignal(1, &one, c, s));
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclWaitSignal(1, &one, c, s));
  EXPECT(ncclWaitSignal(1, &one, c, s) == ncclRemoteError);
  EXPECT(strstr(ncclGetLastError(c), beyond) != NULL);
  EXPECT(ncclGroupEnd() == ncclRemoteError);
  EXPECT_OK(ncclWaitSignal(1, &one, c, s));
  int waited = settled(s, "the waits for the signals rank 1 sent before its end");
  EXPECT(waited);
  ncclResult_t more = ncclWaitSignal(1, &one, c, s);
  EXPECT(more == ncclRemoteError);
  EXPECT(strstr(ncclGetLastError(c), beyond) != NULL);
  int inbox = left_in_own_inbox(c, name, peer);
  EXPECT(inbox == own);
  ncclResult_t got = ncclRecv(small + GOT, SMALL, ncclInt8, peer, c, s);
  EXPECT(got == (inbox ? ncclSuccess : ncclRemoteError));
  if (!own) EXPECT(strstr(ncclGetLastError(c), "is in the inbox of a pair block its process made") != NULL);
  int taken = got != ncclSuccess || settled(s, "the receive of the message rank 1 left");
  EXPECT(taken);
  if (got == ncclSuccess && taken) expect_pattern(small + GOT, SMALL, seed, "the message rank 1 left");
  printf(
      "test_peer_left: %s communicator, after rank 1's normal end: the waits for the %d signals it sent: %s; "
      "one more: %s; the receive of the message it left: %s\n",
      name, sent, waited ? "passed" : "still waiting", ncclGetErrorString(more),
      got != ncclSuccess ? ncclGetErrorString(got)
      : taken            ? "taken"
                         : "still waiting");
  EXPECT(ncclRecv(small + REFUSED, SMALL, ncclInt8, peer, c, s) == ncclRemoteError); /* it posted one */
  if (own) EXPECT(strstr(ncclGetLastError(c), "having posted 1 messages to this rank") != NULL);
  EXPECT(async_of(c) == ncclSuccess);
  return waited && taken;
}

int main(int argc, char** argv) {
  char period[16];
  snprintf(period, sizeof(period), "%d", WATCHDOG_MS);
  setenv("MPINCCL_WATCHDOG_MS", period, 1);
  int rc = harness_start(argc, argv, "test_peer_left", "2", "TEST_PEER_LEFT", 0);
  if (rc >= 0) return rc;
  int peer = 1 - rank;
  proc_t me = {(int)getpid(), 0}, theirs = {0, 0};
  me.start_time = mpn_proc_start_time(me.pid);
  MPI_Sendrecv(&me, (int)sizeof(me), MPI_BYTE, peer, 0, &theirs, (int)sizeof(theirs), MPI_BYTE, peer, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  ncclComm_t waiting = NULL;
  cudaStream_t s2 = NULL, s3 = NULL, s4 = NULL;
  char *buf = NULL, *small = NULL;
  EXPECT(cudaMalloc((void**)&buf, 3 * BYTES) == cudaSuccess);
  EXPECT(cudaMalloc((void**)&small, 5 * SMALL) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&s4, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT_OK(mpincclCommInitMPI(&waiting, MPI_COMM_WORLD, NULL));
  ncclComm_t idle = NULL, late = NULL, behind = NULL, kept[2] = {NULL, NULL};
  EXPECT_OK(mpincclCommInitMPI(&idle, MPI_COMM_WORLD, NULL));
  EXPECT_OK(mpincclCommInitMPI(&late, MPI_COMM_WORLD, NULL));
  EXPECT_OK(mpincclCommInitMPI(&behind, MPI_COMM_WORLD, NULL));
  for (int k = 0; k < 2; k++) EXPECT_OK(mpincclCommInitMPI(&kept[k], MPI_COMM_WORLD, NULL));
  exchange(comm, stream, buf, peer);
  exchange(waiting, s2, buf, peer);
  exchange(behind, s3, buf, peer);
  int left_done = leave_messages(kept, s4, small, peer);
  if (rank == 1) {
    /* (a stream still waiting would hold a destroy for good: an abort lets it go) */
    for (int k = 0; k < 2; k++) EXPECT_OK(left_done ? ncclCommDestroy(kept[k]) : ncclCommAbort(kept[k]));
    EXPECT_OK(ncclCommDestroy(behind));
    EXPECT_OK(ncclCommDestroy(late));
    EXPECT_OK(ncclCommDestroy(idle));
    EXPECT_OK(ncclCommDestroy(waiting));
    EXPECT_OK(ncclCommDestroy(comm));
    printf("test_peer_left: rank 1 %s\n", failures ? "FAIL" : "ok");
    MPI_Finalize();
    return failures ? 1 : 0;
  }
  /* A receive rank 1 never answers, on the second communicator only. */
  EXPECT_OK(ncclRecv(buf + 2 * BYTES, BYTES, ncclInt8, peer, waiting, s2));
  EXPECT_OK(ncclGroupStart()); /* (ended once the watchdog found rank 1 gone) */
  EXPECT_OK(ncclRecv(buf + 2 * BYTES, BYTES, ncclInt8, peer, late, s2));
  late_group_t lg = {behind, s3, 0, peer, 0, ncclInternalError, ncclInternalError};
  EXPECT(cudaGetDevice(&lg.device) == cudaSuccess);
  pthread_t lg_thread;
  EXPECT(pthread_create(&lg_thread, NULL, late_group_main, &lg) == 0);
  while (__atomic_load_n(&lg.queued, __ATOMIC_ACQUIRE) == ncclInternalError) usleep(1000);
  EXPECT_OK(lg.queued);
  MPI_Finalize(); /* (rank 1 may be gone from here on) */
  int gone = 0;
  for (int i = 0; i < 6000 && !(gone = mpn_proc_gone(theirs.pid, theirs.start_time)); i++) usleep(10000);
  EXPECT(gone);
  usleep(10 * WATCHDOG_MS * 1000);
  EXPECT(async_of(waiting) == ncclRemoteError); /* its receive waited for rank 1 */
  EXPECT(strstr(ncclGetLastError(waiting), "is gone") != NULL);
  /* (the thread's latest text is a refusal's from here on) */
  EXPECT(async_of(idle) == ncclSuccess); /* nothing shared, nothing waited */
  EXPECT(ncclSend(buf, BYTES, ncclInt8, peer, idle, stream) == ncclRemoteError);
  EXPECT(strstr(ncclGetLastError(idle), "process exited") != NULL);
  EXPECT(__atomic_load_n(&late->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_EXITED);
  EXPECT(__atomic_load_n(&behind->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_LEFT);
  EXPECT(async_of(behind) == ncclSuccess);
  ncclResult_t ended = ncclGroupEnd();
  usleep(10 * WATCHDOG_MS * 1000);
  printf("test_peer_left: the group ended after the mark returned %s, its communicator's error %s\n",
         ncclGetErrorString(ended), ncclGetErrorString(async_of(late)));
  EXPECT(ended == ncclRemoteError || async_of(late) == ncclRemoteError);
  EXPECT(cudaStreamSynchronize(s2) == cudaSuccess); /* let go */
  __atomic_store_n(&lg.go, 1, __ATOMIC_RELEASE);
  EXPECT(pthread_join(lg_thread, NULL) == 0);
  printf("test_peer_left: the fifth group ended after the mark returned %s\n", ncclGetErrorString(lg.ended));
  usleep(10 * WATCHDOG_MS * 1000);
  /* The wait for a signal rank 1 never sent: reported and let go (polled,
   * so that a wait left for good fails the test rather than hangs it). */
  int released = 0;
  for (int i = 0; i < 500 && !(released = cudaStreamQuery(s3) == cudaSuccess); i++) usleep(10000);
  printf("test_peer_left: a wait launched after a normal end was marked: %s, its communicator's error %s\n",
         released ? "let go" : "still waiting", ncclGetErrorString(async_of(behind)));
  EXPECT(released);
  EXPECT(async_of(behind) == ncclRemoteError);
  EXPECT(async_of(comm) == ncclSuccess); /* a normal end: nothing of rank 0's waited for it */
  EXPECT(ncclSend(buf, BYTES, ncclInt8, peer, comm, stream) == ncclRemoteError);
  EXPECT(strstr(ncclGetLastError(comm), "ended its communicator") != NULL);
  EXPECT(ncclSignal(peer, 0, 0, 0, comm, stream) == ncclRemoteError);
  EXPECT(async_of(comm) == ncclSuccess);            /* (a refused call is the caller's error only) */
  EXPECT(cudaStreamSynchronize(s2) == cudaSuccess); /* let go */
  left_done = left_done && take_left(kept[0], "sixth", SIXTH_SIGNALS, 1, seed_of(1, 0, 6), s4, small, peer);
  left_done = left_done && take_left(kept[1], "seventh", SEVENTH_SIGNALS, 0, seed_of(1, 0, 7), s4, small, peer);
  /* (a destroy would wait for a stream still waiting) */
  for (int k = 0; k < 2; k++) EXPECT_OK(left_done ? ncclCommDestroy(kept[k]) : ncclCommAbort(kept[k]));
  EXPECT_OK(ncclCommAbort(waiting));
  EXPECT_OK(ncclCommAbort(late));
  EXPECT_OK(ncclCommAbort(behind));
  EXPECT_OK(ncclCommDestroy(idle));
  EXPECT_OK(ncclCommDestroy(comm));
  EXPECT(cudaStreamDestroy(s2) == cudaSuccess);
  if (released) EXPECT(cudaStreamDestroy(s3) == cudaSuccess); /* (one still waiting is left to the exit) */
  if (left_done) EXPECT(cudaStreamDestroy(s4) == cudaSuccess);
  EXPECT(cudaFree(buf) == cudaSuccess);
  if (left_done) EXPECT(cudaFree(small) == cudaSuccess);
  printf("test_peer_left: rank 0 %s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
