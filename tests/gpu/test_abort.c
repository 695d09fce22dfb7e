/*
 * test_abort.c - run with two ranks of one host, both alive throughout, by
 * launch_abort_ipc.sh (CUDA IPC between them) and launch_abort_ucx.sh (UCX
 * forced).  Rank 0 sets up the pair state first, so that over IPC the
 * flags live in its device memory, then its stream waits for a message
 * rank 1 never sends (with TEST_ABORT_WAIT=signal: for a signal on a
 * window, which it never sends either).  Rank 0's ncclCommAbort must return promptly
 * (freeing device memory synchronizes the device, so a stream still
 * waiting would hang it), its stream must be released and its CUDA context
 * must still work; rank 1 must then see ncclRemoteError from
 * ncclCommGetAsyncError and abort promptly too.  With TEST_ABORT_WAIT=graph
 * the two ranks first replay together a CUDA graph in which rank 1 sends
 * 4 KiB to rank 0, then rank 1 replays it TEST_ABORT_REPLAYS (default 6)
 * times more alone, so that its stream waits for rank 0 (with
 * MPINCCL_EAGER_GRAPH=1 under MPS, through the graph slot's inbox: for the
 * previous replay's message to be copied out): after its abort that stream
 * must be released too, every replay of it (TEST_ABORT_WAIT=graph_signal:
 * the graph holds rank 1's wait for a signal of rank 0, and rank 0's stream
 * waits for a signal as in signal mode).  A captured wait puts its flag
 * back to 0 after it, so a single release let one replay through, and the
 * abort, which frees device memory, waited for the next one for good.  With
 * TEST_ABORT_WAIT=signals rank 1's stream waits for a signal of rank 0 as
 * well, and must be released once the abort is known, before rank 1's own
 * abort (the watchdog lets go of the waits for a peer that aborted; over
 * UCX it did not, and the stream waited until rank 1 aborted too).  Rank 0
 * prints one line ending in "ok" or "FAIL".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault_gpu.h"

enum { BYTES = 4096 };

typedef struct {
  double seen_s, abort_s; /* rank 1: when the error came; both: how long the abort took */
  int async, aborted, ok;
  int replays_left; /* rank 1 with a graph: replays still waiting when the error came (-1: none launched) */
  int drained;      /* rank 1 with a graph: its stream released after the abort */
} outcome_t;

/* Rank 0: a receive nobody matches (or, with signal, a wait for a signal
 * nobody sends), then the abort. */
static outcome_t abort_stuck(const fault_gpu_t* f, char* buf, int signal, cudaError_t* drained, int* stuck,
                             int* works) {
  outcome_t o = {0};
  ncclWaitSignalDesc_t desc = {.opCnt = 1, .peer = 1, .sigIdx = 0, .ctx = 0};
  ncclResult_t recv =
      signal ? ncclWaitSignal(1, &desc, f->comm, f->stream) : ncclRecv(buf, BYTES, ncclInt8, 1, f->comm, f->stream);
  usleep(300 * 1000);
  *stuck = cudaStreamQuery(f->stream) == cudaErrorNotReady;
  double t0 = fault_now();
  o.aborted = ncclCommAbort(f->comm);
  o.abort_s = fault_now() - t0;
  *drained = fault_stream_drain(f->stream, 10);
  *works = fault_context_works();
  o.ok =
      recv == ncclSuccess && *stuck && o.aborted == ncclSuccess && o.abort_s < 5 && *drained == cudaSuccess && *works;
  return o;
}

/* Rank 1: hears of the peer's abort, then aborts; with exec, its stream
 * must be released after that too. */
static outcome_t abort_told(const fault_gpu_t* f, cudaGraphExec_t exec, int waits, char* why, size_t len) {
  outcome_t o = {.replays_left = -1, .drained = 1};
  ncclWaitSignalDesc_t desc = {.opCnt = 1, .peer = 0, .sigIdx = 0, .ctx = 0};
  if (waits && ncclWaitSignal(1, &desc, f->comm, f->stream) != ncclSuccess) o.drained = 0;
  o.async = fault_wait_async(f->comm, 20, &o.seen_s);
  if (waits) o.drained = o.drained && fault_stream_drain(f->stream, 10) == cudaSuccess; /* before its own abort */
  if (exec) o.replays_left = cudaStreamQuery(f->stream) == cudaErrorNotReady;
  snprintf(why, len, "%s", ncclGetLastError(f->comm));
  double t0 = fault_now();
  o.aborted = ncclCommAbort(f->comm);
  o.abort_s = fault_now() - t0;
  if (exec) o.drained = fault_stream_drain(f->stream, 10) == cudaSuccess;
  o.ok = o.async == ncclRemoteError && o.seen_s < 10 && o.aborted == ncclSuccess && o.abort_s < 5 && o.drained;
  return o;
}

/* Both ranks: a graph of rank 1's send of BYTES to rank 0 (signals: of
 * rank 1's wait for a signal of rank 0), replayed once by both; then rank 1
 * launches it TEST_ABORT_REPLAYS times more, which rank 0 never matches.
 * Returns rank 1's executable graph (NULL on rank 0). */
static cudaGraphExec_t graph_left_waiting(const fault_gpu_t* f, char* buf, int signals) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  ncclWaitSignalDesc_t desc = {.opCnt = 1, .peer = 0, .sigIdx = 0, .ctx = 0};
  ncclResult_t captured = ncclInternalError;
  int began = cudaStreamBeginCapture(f->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (began && signals)
    captured = f->rank == 1 ? ncclWaitSignal(1, &desc, f->comm, f->stream) : ncclSignal(1, 0, 0, 0, f->comm, f->stream);
  else if (began)
    captured = f->rank == 1 ? ncclSend(buf, BYTES, ncclInt8, 0, f->comm, f->stream)
                            : ncclRecv(buf + BYTES, BYTES, ncclInt8, 1, f->comm, f->stream);
  int ok = began && captured == ncclSuccess;
  ok = cudaStreamEndCapture(f->stream, &graph) == cudaSuccess && ok &&
       cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess && cudaGraphLaunch(exec, f->stream) == cudaSuccess &&
       cudaStreamSynchronize(f->stream) == cudaSuccess;
  if (!ok) {
    fprintf(stderr, "rank %d: the captured %s failed: %s\n", f->rank, signals ? "signal" : "send",
            ncclGetLastError(f->comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (f->rank == 0) return NULL;
  const char* env = getenv("TEST_ABORT_REPLAYS");
  int replays = env ? atoi(env) : 6;
  for (int k = 0; k < replays; k++)
    if (cudaGraphLaunch(exec, f->stream) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  return exec;
}

int main(int argc, char** argv) {
  fault_gpu_t f;
  int rc = fault_gpu_start("test_abort", &argc, &argv, &f);
  if (rc != 0) return rc;
  char* buf = NULL;
  if (cudaMalloc((void**)&buf, 2 * BYTES) != cudaSuccess) return 1;
  fault_pair_setup(buf, BYTES, 0, &f); /* the flags in rank 0's memory */
  const char* mode = getenv("TEST_ABORT_WAIT");
  int signals = mode && strcmp(mode, "signals") == 0, graph_signal = mode && strcmp(mode, "graph_signal") == 0;
  int graph = graph_signal || (mode && strcmp(mode, "graph") == 0);
  int signal = signals || graph_signal || (mode && strcmp(mode, "signal") == 0);
  ncclWindow_t win = NULL;
  if (signal && ncclCommWindowRegister(f.comm, buf, 2 * BYTES, &win, NCCL_WIN_DEFAULT) != ncclSuccess) {
    fprintf(stderr, "rank %d: window registration failed: %s\n", f.rank, ncclGetLastError(f.comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cudaError_t drained = cudaSuccess;
  int stuck = 0, works = 0;
  char why[256] = "";
  cudaGraphExec_t exec = graph ? graph_left_waiting(&f, buf, graph_signal) : NULL;
  outcome_t mine = f.rank == 0 ? abort_stuck(&f, buf, signal, &drained, &stuck, &works)
                               : abort_told(&f, exec, signals, why, sizeof(why));
  outcome_t told = mine;
  if (f.rank == 1) MPI_Send(&mine, (int)sizeof(mine), MPI_BYTE, 0, 0, MPI_COMM_WORLD);
  if (f.rank == 0) {
    char text[256];
    MPI_Recv(&told, (int)sizeof(told), MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(text, sizeof(text), MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    int ok = mine.ok && told.ok;
    char left[96] = "";
    if (graph)
      snprintf(left, sizeof(left), ", its graph's replays %s then and %s after it",
               told.replays_left ? "still waiting" : "done", told.drained ? "released" : "NOT released");
    else if (signals)
      snprintf(left, sizeof(left), ", its wait for rank 0's signal %s before its abort",
               told.drained ? "released" : "NOT released");
    printf(
        "test_abort: %s: rank 0's stream %s, abort took %.2f s, stream %s, context %s; rank 1 saw %s after "
        "%.1f s (%s), abort took %.2f s%s: %s\n",
        signals        ? "signal waits on both ranks"
        : graph_signal ? "signal wait, rank 1 waiting for signals in a graph"
        : signal       ? "signal wait"
        : graph        ? "receive, rank 1 in a graph"
                       : "receive",
        stuck ? "waited" : "did not wait", mine.abort_s,
        drained == cudaSuccess ? "released" : cudaGetErrorString(drained), works ? "works" : "broken",
        ncclGetErrorString((ncclResult_t)told.async), told.seen_s, text, told.abort_s, left, ok ? "ok" : "FAIL");
    fflush(stdout);
    rc = ok ? 0 : 1;
  } else {
    MPI_Send(why, sizeof(why), MPI_CHAR, 0, 1, MPI_COMM_WORLD);
  }
  cudaFree(buf);
  MPI_Finalize();
  return rc;
}
