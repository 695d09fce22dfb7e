/*
 * test_p2p_graphs.c - test_p2p's steps for messages captured in CUDA
 * graphs: replays with new data, small messages beside a large one,
 * captures past a pair's graph slots (one after another, and in one
 * capture or group), and a pool buffer's stage held by a graph.  Every
 * received byte is checked against its sender's pattern.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "cuda/ipc.h"
#include "harness.h"
#include "mpinccl.h"
#include "p2p/p2p.h"
#include "p2p/stage.h"
#include "pattern.h"
#include "test_p2p.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/graph.h"
#include "ucx/orphans.h"
#endif

/* One group of c on the test stream: bytes from s to rank `to`, into r from
 * rank `from`; ncclGroupEnd's result. */
static ncclResult_t ring_group(ncclComm_t c, const char* s, char* r, size_t bytes, int to, int from) {
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, to, c, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, from, c, stream));
  return ncclGroupEnd();
}

/* A ring captured in a CUDA graph, replayed 100 times with new data each time. */
void graph_replay(void) {
  size_t bytes = 300000;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  /* (over UCX too: staged whole, posted by a host node, ucx/graph.c) */
  EXPECT_OK(ring_group(comm, s, r, bytes, to, from));
  int captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  EXPECT(captured);
  int ready = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  EXPECT(!captured || ready);
  if (!ready) { /* reported above; nothing to replay */
    cudaGetLastError();
    if (captured) cudaGraphDestroy(graph);
    MPI_Barrier(MPI_COMM_WORLD);
    cudaFree(s);
    cudaFree(r);
    return;
  }
  int bad = 0;
  for (int k = 0; k < 100; k++) {
    pattern_fill(s, bytes, seed_of(rank, to, 1000 + k), stream);
    EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
    bad += pattern_check(r, bytes, seed_of(from, rank, 1000 + k), stream) != 0;
    /* Nobody refills its send buffer before its peer has read it. */
    MPI_Barrier(MPI_COMM_WORLD);
  }
  EXPECT(bad == 0);
  /* Eager messages still flow after the graph ones. */
  ring(4096, 1, ncclInt8, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(s);
  cudaFree(r);
}

/* Small messages captured in a CUDA graph (under MPS each through its
 * graph slot's own inbox slot: 8 of them in the launch, as many as
 * MPINCCL_EAGER_GRAPH asks by default), beside a
 * larger one to the same peer that takes the two-hop path, replayed 100
 * times with new data; every second replay follows the first with no host
 * synchronization between, so that a replay's copy into the inbox may
 * have to wait for the previous replay's copy out at the peer. */
void graph_small(void) {
  enum { N = 5, REPLAYS = 100 };
  const size_t sizes[N] = {1, 8, 1000, 4096, 70000};
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s[N], *r[N];
  for (int i = 0; i < N; i++) s[i] = dev_alloc(sizes[i]), r[i] = dev_alloc(sizes[i]);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(NULL, 0, ncclInt8, to, comm, stream)); /* a message of no bytes first */
  EXPECT_OK(ncclRecv(NULL, 0, ncclInt8, from, comm, stream));
  for (int i = 0; i < N; i++) {
    EXPECT_OK(ncclSend(s[i], sizes[i], ncclInt8, to, comm, stream));
    EXPECT_OK(ncclRecv(r[i], sizes[i], ncclInt8, from, comm, stream));
  }
  EXPECT_OK(ncclGroupEnd());
  int captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  EXPECT(captured);
  int ready = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, all = 0;
  EXPECT(!captured || ready);
  MPI_Allreduce(&ready, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD); /* nobody replays alone */
  int bad = 0;
  for (int k = 0; all && k < REPLAYS; k++) {
    for (int i = 0; i < N; i++) pattern_fill(s[i], sizes[i], seed_of(rank, i, 3000 + k), stream);
    EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
    if (k % 2 == 0) continue; /* the next replay follows at once */
    for (int i = 0; i < N; i++) bad += pattern_check(r[i], sizes[i], seed_of(from, i, 3000 + k), stream) != 0;
    /* Nobody refills its send buffers before its peer has read them. */
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (bad) fprintf(stderr, "[rank %d] graph_small: %d wrong buffers\n", rank, bad);
  EXPECT(bad == 0);
  if (ready) cudaGraphExecDestroy(exec);
  if (captured) cudaGraphDestroy(graph);
  cudaGetLastError();
  for (int i = 0; i < N; i++) cudaFree(s[i]), cudaFree(r[i]);
  /* Messages not captured still flow after the captured ones. */
  ring(4096, 1, ncclInt8, 0);
}

/* A ring of new data (seeds of k) captured in a graph, replayed once and
 * destroyed; adds to *bad if the data came wrong; whether the capture
 * failed (said why). */
static int ring_captured_once(char* s, char* r, size_t bytes, int to, int from, int k, int* bad) {
  pattern_fill(s, bytes, seed_of(rank, to, k), stream);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  ncclResult_t res = ring_group(comm, s, r, bytes, to, from);
  int captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  int ready = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  int failed = res != ncclSuccess || !ready;
  if (failed) {
    fprintf(stderr, "[rank %d] capture %d: %s (%s)\n", rank, k, ncclGetErrorString(res), ncclGetLastError(comm));
  } else {
    EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
    *bad += pattern_check(r, bytes, seed_of(from, rank, k), stream) != 0;
    cudaGraphExecDestroy(exec);
  }
  if (captured) cudaGraphDestroy(graph);
  cudaGetLastError();
  return failed;
}

/* More captured messages of a pair than it has graph slots (256), in
 * graphs each destroyed after one replay: the slots come back (before, the
 * 257th capture was refused). */
void graph_recapture(void) {
  size_t bytes = 4096;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks, bad = 0, failed = 0;
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
#ifdef HAVE_UCX
  uint64_t held_before = mpn_ucx_graph_held();
#endif
  for (int k = 0; k < 300 && !failed; k++) {
    failed = ring_captured_once(s, r, bytes, to, from, 5000 + k, &bad);
    MPI_Barrier(MPI_COMM_WORLD); /* nobody refills its send buffer before its peer has read it */
  }
  EXPECT(!failed);
  EXPECT(bad == 0);
#ifdef HAVE_UCX
  if (harness_over_ucx()) { /* their staging goes once the graph is gone (ucx/graph.c) */
    int live = mpn_ucx_graph_groups(comm);
    /* and so do the groups themselves, with their pinned words */
    unsigned long long held = (unsigned long long)(mpn_ucx_graph_held() - held_before);
    printf("test_p2p: [rank %d] captured groups over UCX after 300 captures: %d in the list, %llu not freed\n", rank,
           live, held);
    EXPECT(live <= 16);
    EXPECT(held <= 16);
  }
#endif
  mpn_graph_stats_t st;
  mpn_p2p_graph_stats(&st);
  printf(
      "test_p2p: [rank %d] graph records: %llu attached, %llu refused, %llu released; slot sides: %llu filed, "
      "%llu marked, %llu orphaned\n",
      rank, (unsigned long long)st.attached, (unsigned long long)st.not_attached, (unsigned long long)st.released,
      (unsigned long long)st.filed, (unsigned long long)st.marked, (unsigned long long)st.orphaned);
  cudaFree(s);
  cudaFree(r);
}

/* Rings captured over new buffers, each graph destroyed after one replay:
 * this process's imports of the peer's buffers stay open only while the
 * graphs live (cuda/ipc.h, mpn_ipc_mark_captured).  Before, each stayed
 * mapped for good, holding the memory of a buffer its owner had freed. */
void graph_new_buffers(void) {
  if (harness_over_ucx()) return; /* (no CUDA IPC) */
  size_t bytes = 65536 + 8;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks, bad = 0, failed = 0;
  int before = mpn_ipc_held_open();
  for (int k = 0; k < 24 && !failed; k++) {
    char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
    failed = ring_captured_once(s, r, bytes, to, from, 7000 + k, &bad);
    MPI_Barrier(MPI_COMM_WORLD); /* nobody frees a buffer its peer's graph still writes */
    cudaFree(s);
    cudaFree(r);
  }
  EXPECT(!failed);
  EXPECT(bad == 0);
  /* The news of a graph gone comes on CUDA's thread, soon after. */
  int held = mpn_ipc_held_open();
  for (int waited = 0; waited < 200 && held > before; waited++) {
    usleep(10000);
    held = mpn_ipc_held_open();
  }
  printf("test_p2p: [rank %d] imports held open: %d before 24 captures over new buffers, %d after\n", rank, before,
         held);
  EXPECT(held <= before);
}

/* A graph captured over UCX that outlives its communicator: its group is
 * kept whole (a replay queued before the destroy still reads its staging)
 * and freed once the graph is gone, at a later captured launch of another
 * communicator (ucx/graph.c).  Before, its record and words stayed for good. */
void graph_outlives_comm(void) {
#ifdef HAVE_UCX
  if (!harness_over_ucx() || nranks < 2) return;
  size_t bytes = 4096;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks, bad = 0;
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
  uint64_t held_before = mpn_ucx_graph_held();
  int live_before = mpn_ucx_graph_groups(comm), orphans_before = mpn_ucx_orphans_count();
  ncclComm_t c = NULL;
  EXPECT_OK(mpincclCommInitMPI(&c, MPI_COMM_WORLD, NULL));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  EXPECT_OK(ring_group(c, s, r, bytes, to, from));
  int ready = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  ready = ready && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  EXPECT(ready);
  if (ready) {
    pattern_fill(s, bytes, seed_of(rank, to, 9000), stream);
    EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
    bad += pattern_check(r, bytes, seed_of(from, rank, 9000), stream) != 0;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_OK(ncclCommDestroy(c)); /* the graph lives on */
  int kept = mpn_ucx_orphans_count() - orphans_before;
  if (ready) {
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  /* The news of the graph gone comes on CUDA's thread; captured launches of
   * the test's communicator free what it kept (every rank captures alike). */
  int orphans = 0, failed = 0;
  for (int k = 0; k < 100; k++) {
    int mine[2] = {mpn_ucx_orphans_count() - orphans_before, failed}, most[2];
    MPI_Allreduce(mine, most, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    orphans = mine[0];
    if (most[0] <= 0 || most[1]) break;
    failed = ring_captured_once(s, r, bytes, to, from, 9001 + k, &bad);
    MPI_Barrier(MPI_COMM_WORLD); /* nobody refills its send buffer before its peer has read it */
    usleep(10000);
  }
  long long held = (long long)(mpn_ucx_graph_held() - held_before);
  int live = mpn_ucx_graph_groups(comm) - live_before;
  printf(
      "test_p2p: [rank %d] a graph outliving its communicator over UCX: %d kept at the destroy, %d after; "
      "%lld groups not freed, %d of them in the test communicator's list\n",
      rank, kept, orphans, held, live);
  EXPECT(!failed);
  EXPECT(bad == 0);
  EXPECT(!ready || kept == 1);
  EXPECT(orphans <= 0);
  EXPECT(held <= live);
  cudaFree(s);
  cudaFree(r);
#endif
}

/* One capture needing more than a pair's 256 graph slots: the 257th
 * message finds its slot held by a message of the same capture, which no
 * wait can free; it is refused at once and both communicators are failed. */
void graph_same_capture(void) {
  if (harness_over_ucx()) return; /* (captured over UCX: no slots) */
  ncclComm_t c = NULL;
  EXPECT_OK(mpincclCommInitMPI(&c, MPI_COMM_WORLD, NULL));
  if (c == NULL) return;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s = dev_alloc(8), *r = dev_alloc(8);
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  EXPECT_OK(ncclGroupStart());
  for (int k = 0; k < 256; k++) {
    EXPECT_OK(ncclSend(s, 8, ncclInt8, to, c, stream));
    EXPECT_OK(ncclRecv(r, 8, ncclInt8, from, c, stream));
  }
  EXPECT_OK(ncclGroupEnd());
  harness_same_capture_refused(c, ring_group(c, s, r, 8, to, from));
  EXPECT_OK(ncclCommAbort(c));
  cudaFree(s);
  cudaFree(r);
}

/* More captured messages to one peer in one group than a pair has graph
 * slots (256): refused before anything is posted, so the communicator goes
 * on working (desk review: the group check allowed 512, and the 257th was
 * refused after the others were posted, failing both communicators).  Not
 * run on a GPU when written. */
void graph_group_limit(void) {
  if (harness_over_ucx()) return; /* (captured over UCX: no slots) */
  ncclComm_t c = NULL;
  EXPECT_OK(mpincclCommInitMPI(&c, MPI_COMM_WORLD, NULL));
  if (c == NULL) return;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s = dev_alloc(4096), *r = dev_alloc(4096);
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  EXPECT_OK(ncclGroupStart());
  for (int k = 0; k < 257; k++) {
    EXPECT_OK(ncclSend(s, 8, ncclInt8, to, c, stream));
    EXPECT_OK(ncclRecv(r, 8, ncclInt8, from, c, stream));
  }
  EXPECT_ERR(ncclGroupEnd(), ncclInvalidUsage, "at most 256 per peer and direction in a CUDA graph capture");
  cudaGraph_t g = NULL;
  EXPECT(cudaStreamEndCapture(stream, &g) == cudaSuccess);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  ncclResult_t async = ncclInternalError;
  EXPECT(ncclCommGetAsyncError(c, &async) == ncclSuccess);
  EXPECT(async == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  pattern_fill(s, 4096, seed_of(rank, to, 6100), stream);
  EXPECT_OK(ring_group(c, s, r, 4096, to, from)); /* the numbering is still in step */
  expect_pattern(r, 4096, seed_of(from, rank, 6100), "after a refused captured group");
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT_OK(ncclCommDestroy(c));
  cudaFree(s);
  cudaFree(r);
}

/* A send from a memory-pool buffer captured as the first side takes a stage
 * the graph keeps; once the graph is destroyed the stage serves again
 * (before, it stayed pinned for good).  Rank 0 captures its send first,
 * rank 1 its receive after a barrier; between processes only. */
void graph_pool_stage(void) {
  int pair = nranks >= 2 && rank < 2 && comm->transport[1 - rank] == MPN_TRANSPORT_IPC;
  int both = 0;
  MPI_Allreduce(&pair, &both, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (both < 2) return;
  size_t bytes = 65536;
  /* Graphs of earlier steps are destroyed, but CUDA's thread may tell of it
   * late: their stages are let go first, so that the counts below are this
   * graph's alone (run bi: "1 before, 2 with the graph, 0 after"). */
  for (int k = 0; k < 2000 && mpn_stage_pinned() != 0; k++) usleep(1000);
  int before = mpn_stage_pinned(), during = before, after = before;
  char* buf = rank == 0 ? buf_alloc(BUF_POOL, bytes) : rank == 1 ? dev_alloc(bytes) : NULL;
  if (rank == 0) pattern_fill(buf, bytes, seed_of(0, 1, 6000), stream);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int captured = 0;
  for (int turn = 0; turn < 2; turn++) {
    if (rank == turn) {
      EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      EXPECT_OK(rank == 0 ? ncclSend(buf, bytes, ncclInt8, 1, comm, stream)
                          : ncclRecv(buf, bytes, ncclInt8, 0, comm, stream));
      captured =
          cudaStreamEndCapture(stream, &graph) == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank < 2) EXPECT(captured); /* (the other ranks only pass the barriers) */
  if (captured) EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
  if (rank == 1) expect_pattern(buf, bytes, seed_of(0, 1, 6000), "graph from a pool buffer");
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  during = mpn_stage_pinned();
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  for (int k = 0; k < 2000 && (after = mpn_stage_pinned()) != before; k++) usleep(1000); /* CUDA's thread */
  if (rank == 0) {
    EXPECT(during == before + 1); /* the first side's stage, held by the graph */
    EXPECT(after == before);
    printf("test_p2p: pool stages held by graphs: %d before, %d with the graph, %d after its destroy\n", before, during,
           after);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank < 2) buf_free(rank == 0 ? BUF_POOL : BUF_DEVICE, buf);
  cudaStreamSynchronize(stream);
}

/* One captured group whose sends to one peer are on two streams (the
 * second forked from the first inside the capture) and whose receives are
 * on the first, plus a message each way on a second communicator: the
 * n-th send of a pair matches the peer's n-th receive whichever stream it
 * is on, replay after replay.  Over UCX the second communicator keeps its
 * own captured group (its destroy waits for it: ucx/graph.c). */
void graph_two_streams(void) {
  if (nranks < 2) return;
  enum { N = 3 };
  size_t bytes = 3 * 65536 + 5;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  ncclComm_t other;
  EXPECT_OK(ncclCommSplit(comm, 0, rank, &other, NULL));
  cudaStream_t s2;
  cudaEvent_t fork, join;
  EXPECT(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
  EXPECT(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
  char *s = dev_alloc(N * bytes), *r = dev_alloc(N * bytes), *so = dev_alloc(bytes), *ro = dev_alloc(bytes);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  EXPECT(cudaEventRecord(fork, stream) == cudaSuccess);
  EXPECT(cudaStreamWaitEvent(s2, fork, 0) == cudaSuccess);
  EXPECT_OK(ncclGroupStart());
  for (int k = 0; k < N; k++) EXPECT_OK(ncclSend(s + k * bytes, bytes, ncclInt8, to, comm, k == 1 ? s2 : stream));
  for (int k = 0; k < N; k++) EXPECT_OK(ncclRecv(r + k * bytes, bytes, ncclInt8, from, comm, stream));
  EXPECT_OK(ncclSend(so, bytes, ncclInt8, to, other, stream));
  EXPECT_OK(ncclRecv(ro, bytes, ncclInt8, from, other, stream));
  EXPECT_OK(ncclGroupEnd());
  EXPECT(cudaEventRecord(join, s2) == cudaSuccess);
  EXPECT(cudaStreamWaitEvent(stream, join, 0) == cudaSuccess);
  int captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  EXPECT(captured);
  int ready = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  EXPECT(!captured || ready);
#ifdef HAVE_UCX
  if (ready && harness_over_ucx()) EXPECT(mpn_ucx_graph_groups(other) >= 1);
#endif
  int bad = 0;
  for (int it = 0; ready && it < 10; it++) {
    for (int k = 0; k < N; k++) pattern_fill(s + k * bytes, bytes, seed_of(rank, to, 1300 + 10 * it + k), stream);
    pattern_fill(so, bytes, seed_of(rank, to, 1400 + it), stream);
    EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
    for (int k = 0; k < N; k++)
      bad += pattern_check(r + k * bytes, bytes, seed_of(from, rank, 1300 + 10 * it + k), stream) != 0;
    bad += pattern_check(ro, bytes, seed_of(from, rank, 1400 + it), stream) != 0;
    MPI_Barrier(MPI_COMM_WORLD); /* nobody refills its send buffers before its peer read them */
  }
  EXPECT(bad == 0);
  if (!ready) cudaGetLastError();
  if (ready) cudaGraphExecDestroy(exec);
  if (captured) cudaGraphDestroy(graph);
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_OK(ncclCommDestroy(other));
  cudaFree(s);
  cudaFree(r);
  cudaFree(so);
  cudaFree(ro);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(s2);
}
