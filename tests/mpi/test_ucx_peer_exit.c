/*
 * test_ucx_peer_exit.c - two processes of one host over UCX (forced, as
 * NCCL_P2P_DISABLE=1 does): rank 1 ends its communicators normally,
 * finalizes MPI and exits, while rank 0 keeps its communicators past its
 * own MPI_Finalize (MPI serves the set-up only).  On a communicator that
 * never carried anything, and on one whose messages were all matched,
 * nothing of rank 0's waits for rank 1: the watchdog takes the exit for
 * an end, as NCCL would, with no error through ncclCommGetAsyncError (it
 * reported rank 1 gone and failed both).  On a third, rank 0 still waits
 * for a message rank 1 never sent: that is a failure, reported
 * (ncclRemoteError), and the receive let go.  On a fourth and a fifth,
 * rank 0 holds what capturing a wait for rank 1's signal, or a signal to
 * it, in a CUDA graph leaves (the counts of rma.c's graph_slot): a replay
 * may wait for rank 1 with nothing posted to the proxy, so that is a
 * failure too (rank 1 was taken for idle, and such a replay waited for
 * good).  On a sixth, the same captured wait on a communicator rank 1
 * used and closed cleanly: its notice of the close came first, so the
 * exit is an end (it was reported gone); on a seventh, used and left
 * open at rank 1's exit (no notice, as in a crash): reported.  Host
 * memory only: no GPU.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/proc.h"
#include "rma/rma.h"
#include "transport.h"
#include "ucx/net.h"
#include "mpi_test.h"
#include "mpinccl.h"

enum { BYTES = 4096, WATCHDOG_MS = 20 };

static int rank;
#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "rank", rank, "")

typedef struct {
  int pid;
  uint64_t start_time;
} proc_t;

/* A message each way between ranks 0 and 1 on c, waited for. */
static void exchange(ncclComm_t c, char* buf, int peer) {
  uint64_t flags[2] = {0, 0};
  int error = 0;
  memset(buf, rank + 1, BYTES);
  EXPECT(mpn_ucx_host_recv(c, peer, buf + BYTES, BYTES, &flags[0], 1, &error) == ncclSuccess);
  EXPECT(mpn_ucx_host_send(c, peer, buf, BYTES, &flags[1], 1, &error) == ncclSuccess);
  time_t end = time(NULL) + 30;
  while ((__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) != 1 || __atomic_load_n(&flags[1], __ATOMIC_ACQUIRE) != 1) &&
         time(NULL) <= end)
    usleep(100);
  EXPECT(flags[0] == 1 && flags[1] == 1 && error == 0);
  EXPECT(buf[BYTES] == (char)(peer + 1) && buf[2 * BYTES - 1] == (char)(peer + 1));
}

/* What capturing a one-sided call with peer leaves on this rank: a
 * count of captured waits for its signals, or of captured signals to it. */
static void captured(ncclComm_t c, int peer, int wait) {
  mpn_rma_t* rma = NULL;
  EXPECT(mpn_rma_state(c, &rma) == ncclSuccess);
  if (rma == NULL) return;
  uint64_t* count = wait ? rma->graph_expected : rma->graph_sent;
  count[mpn_rma_pc(c, peer, 0)]++;
}

static ncclResult_t async_of(ncclComm_t c) {
  ncclResult_t a = ncclInternalError;
  EXPECT(ncclCommGetAsyncError(c, &a) == ncclSuccess);
  return a;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("2");
    return 0;
  }
  char period[16];
  snprintf(period, sizeof(period), "%d", WATCHDOG_MS);
  setenv("MPINCCL_WATCHDOG_MS", period, 1);
  setenv("MPINCCL_TRANSPORT", "ucx", 1);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int peer = 1 - rank;
  proc_t me = {(int)getpid(), 0}, theirs = {0, 0};
  me.start_time = mpn_proc_start_time(me.pid);
  MPI_Sendrecv(&me, (int)sizeof(me), MPI_BYTE, peer, 0, &theirs, (int)sizeof(theirs), MPI_BYTE, peer, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  ncclComm_t idle = NULL, talked = NULL, waiting = NULL, graph_wait = NULL, graph_put = NULL, graph_closed = NULL,
             graph_open = NULL;
  EXPECT(mpincclCommInitMPI(&idle, MPI_COMM_WORLD, NULL) == ncclSuccess);
  EXPECT(mpincclCommInitMPI(&talked, MPI_COMM_WORLD, NULL) == ncclSuccess);
  EXPECT(mpincclCommInitMPI(&waiting, MPI_COMM_WORLD, NULL) == ncclSuccess);
  EXPECT(mpincclCommInitMPI(&graph_wait, MPI_COMM_WORLD, NULL) == ncclSuccess);
  EXPECT(mpincclCommInitMPI(&graph_put, MPI_COMM_WORLD, NULL) == ncclSuccess);
  EXPECT(mpincclCommInitMPI(&graph_closed, MPI_COMM_WORLD, NULL) == ncclSuccess);
  EXPECT(mpincclCommInitMPI(&graph_open, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (!idle || !talked || !waiting || !graph_wait || !graph_put || !graph_closed || !graph_open)
    MPI_Abort(MPI_COMM_WORLD, 1);
  EXPECT(idle->transport[peer] == MPN_TRANSPORT_UCX);
  char* buf = calloc(3, BYTES);
  exchange(talked, buf, peer);
  exchange(waiting, buf, peer);
  exchange(graph_closed, buf, peer); /* (each rank's endpoint to the other opened) */
  exchange(graph_open, buf, peer);
  if (rank == 1) {
    /* graph_open stays open: rank 1 exits as a crashed rank would, unannounced. */
    EXPECT(ncclCommDestroy(graph_closed) == ncclSuccess);
    EXPECT(ncclCommDestroy(graph_put) == ncclSuccess);
    EXPECT(ncclCommDestroy(graph_wait) == ncclSuccess);
    EXPECT(ncclCommDestroy(waiting) == ncclSuccess);
    EXPECT(ncclCommDestroy(talked) == ncclSuccess);
    EXPECT(ncclCommDestroy(idle) == ncclSuccess);
    free(buf);
    printf("test_ucx_peer_exit: rank 1 %s\n", failures ? "FAIL" : "ok");
    MPI_Finalize();
    return failures ? 1 : 0;
  }
  /* A receive rank 1 never answers, on the third communicator only. */
  uint64_t flag = 0;
  int error = 0;
  EXPECT(mpn_ucx_host_recv(waiting, peer, buf + 2 * BYTES, BYTES, &flag, 1, &error) == ncclSuccess);
  captured(graph_wait, peer, 1);
  captured(graph_put, peer, 0);
  captured(graph_closed, peer, 1);
  captured(graph_open, peer, 1);
  MPI_Finalize(); /* (rank 1 may be gone from here on) */
  int gone = 0;
  for (int i = 0; i < 6000 && !(gone = mpn_proc_gone(theirs.pid, theirs.start_time)); i++) usleep(10000);
  EXPECT(gone);
  usleep(10 * WATCHDOG_MS * 1000);
  EXPECT(async_of(idle) == ncclSuccess); /* nothing shared, nothing waited */
  EXPECT(__atomic_load_n(&idle->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_EXITED);
  EXPECT(async_of(talked) == ncclSuccess); /* every message matched */
  EXPECT(__atomic_load_n(&talked->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_EXITED);
  EXPECT(async_of(waiting) == ncclRemoteError); /* its receive waited for rank 1 */
  EXPECT(async_of(graph_wait) == ncclRemoteError); /* a replay may wait for its signal */
  EXPECT(__atomic_load_n(&graph_wait->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_GONE);
  EXPECT(async_of(graph_put) == ncclRemoteError); /* a replay may wait for its acknowledgement */
  EXPECT(__atomic_load_n(&graph_put->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_GONE);
  EXPECT(async_of(graph_closed) == ncclSuccess); /* its clean close was announced */
  EXPECT(__atomic_load_n(&graph_closed->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_EXITED);
  EXPECT(async_of(graph_open) == ncclRemoteError); /* unannounced */
  EXPECT(__atomic_load_n(&graph_open->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_GONE);
  time_t end = time(NULL) + 30;
  while (__atomic_load_n(&flag, __ATOMIC_ACQUIRE) != 1 && time(NULL) <= end) usleep(1000);
  EXPECT(flag == 1 && error != 0); /* let go, failed */
  EXPECT(ncclCommAbort(waiting) == ncclSuccess);
  EXPECT(ncclCommAbort(graph_wait) == ncclSuccess);
  EXPECT(ncclCommAbort(graph_put) == ncclSuccess);
  EXPECT(ncclCommAbort(graph_open) == ncclSuccess);
  EXPECT(ncclCommDestroy(graph_closed) == ncclSuccess);
  EXPECT(ncclCommDestroy(talked) == ncclSuccess);
  EXPECT(ncclCommDestroy(idle) == ncclSuccess);
  free(buf);
  printf("test_ucx_peer_exit: rank 0 %s\n", failures ? "FAIL" : "ok");
  printf("test_ucx_peer_exit: 2 ranks, %d failures\n", failures);
  return failures ? 1 : 0;
}
