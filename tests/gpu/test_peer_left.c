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
 * the refusal of the receive would keep the wait from being launched.)
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

#include "harness.h"

enum { BYTES = 4096, WATCHDOG_MS = 20 };

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
  cudaStream_t s2 = NULL, s3 = NULL;
  char* buf = NULL;
  EXPECT(cudaMalloc((void**)&buf, 3 * BYTES) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT_OK(mpincclCommInitMPI(&waiting, MPI_COMM_WORLD, NULL));
  ncclComm_t idle = NULL, late = NULL, behind = NULL;
  EXPECT_OK(mpincclCommInitMPI(&idle, MPI_COMM_WORLD, NULL));
  EXPECT_OK(mpincclCommInitMPI(&late, MPI_COMM_WORLD, NULL));
  EXPECT_OK(mpincclCommInitMPI(&behind, MPI_COMM_WORLD, NULL));
  exchange(comm, stream, buf, peer);
  exchange(waiting, s2, buf, peer);
  exchange(behind, s3, buf, peer);
  if (rank == 1) {
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
  EXPECT_OK(ncclCommAbort(waiting));
  EXPECT_OK(ncclCommAbort(late));
  EXPECT_OK(ncclCommAbort(behind));
  EXPECT_OK(ncclCommDestroy(idle));
  EXPECT_OK(ncclCommDestroy(comm));
  EXPECT(cudaStreamDestroy(s2) == cudaSuccess);
  if (released) EXPECT(cudaStreamDestroy(s3) == cudaSuccess); /* (one still waiting is left to the exit) */
  EXPECT(cudaFree(buf) == cudaSuccess);
  printf("test_peer_left: rank 0 %s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
