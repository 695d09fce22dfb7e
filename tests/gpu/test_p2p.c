/*
 * test_p2p.c - ncclSend/ncclRecv between ranks sharing a GPU (run under
 * mpirun with 1 to 8 processes) and between ranks of one process: main,
 * which runs every step in order, and the steps for sizes, datatypes,
 * offsets, memory kinds, re-allocated buffers, messages of no bytes and
 * mismatched counts.  Group patterns, split launches and chains through
 * three processes are in test_p2p_patterns.c, CUDA graphs in
 * test_p2p_graphs.c, several communicators in test_p2p_comms.c, the
 * protocol's paths in test_p2p_paths.c.  Every received byte is checked
 * against the pattern its sender wrote.  Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/param.h"
#include "harness.h"
#include "mpinccl.h"
#include "pattern.h"
#include "test_p2p.h"
#include "transport.h"

void* dev_alloc(size_t bytes) {
  void* p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "[rank %d] cudaMalloc(%zu) failed\n", rank, bytes);
    exit(1);
  }
  return p;
}

/* Each rank sends to rank+shift and receives from rank-shift, in one group. */
void ring(size_t bytes, int shift, ncclDataType_t type, size_t offset) {
  int to = (rank + shift) % nranks, from = (rank - shift % nranks + nranks) % nranks;
  char *s = dev_alloc(bytes + offset), *r = dev_alloc(bytes + offset);
  pattern_fill(s + offset, bytes, seed_of(rank, to, (int)bytes), stream);
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  size_t count = bytes / sizes[type];
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s + offset, count, type, to, comm, stream));
  EXPECT_OK(ncclRecv(r + offset, count, type, from, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  char what[96];
  snprintf(what, sizeof(what), "ring %zu bytes type %d offset %zu", bytes, (int)type, offset);
  expect_pattern(r + offset, count * sizes[type], seed_of(from, rank, (int)bytes), what);
  cudaFree(s);
  cudaFree(r);
}

char* buf_alloc(buf_kind_t kind, size_t bytes) {
  char* p = NULL;
  if (kind == BUF_POOL) EXPECT(cudaMallocAsync((void**)&p, bytes, stream) == cudaSuccess);
  else if (kind == BUF_HOST) EXPECT(cudaHostAlloc((void**)&p, bytes, cudaHostAllocDefault) == cudaSuccess);
  else p = dev_alloc(bytes);
  return p;
}

void buf_free(buf_kind_t kind, char* p) {
  if (kind == BUF_POOL) cudaFreeAsync(p, stream);
  else if (kind == BUF_HOST) cudaFreeHost(p);
  else cudaFree(p);
}

/* One ring message of bytes, sent from a send_kind buffer into a recv_kind one. */
static void ring_kinds(size_t bytes, buf_kind_t send_kind, buf_kind_t recv_kind, int seed, const char* what) {
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s = buf_alloc(send_kind, bytes), *r = buf_alloc(recv_kind, bytes);
  pattern_fill(s, bytes, seed_of(rank, to, seed), stream);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, to, comm, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, from, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  char text[96];
  snprintf(text, sizeof(text), "%s, %zu bytes", what, bytes);
  expect_pattern(r, bytes, seed_of(from, rank, seed), text);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  buf_free(send_kind, s);
  buf_free(recv_kind, r);
  cudaStreamSynchronize(stream);
}

/* Buffers from cudaMallocAsync's pool, which CUDA IPC cannot share: each
 * size twice, pool to pool, then pool sends into cudaMalloc receive buffers
 * and back; reused stages must not mix messages up. */
static void pool_buffers(void) {
  static const size_t sizes[] = {1, 4099, (3 << 20) + 7};
  for (int k = 0; k < 6; k++) {
    char what[32];
    snprintf(what, sizeof(what), "pool (case %d)", k);
    ring_kinds(sizes[k % 3], k < 3 || k == 4 ? BUF_POOL : BUF_DEVICE, k < 3 || k == 5 ? BUF_POOL : BUF_DEVICE,
               50 + k, what);
  }
}

/* A stage given back by a message on the legacy default stream (NULL) is
 * reused only once that stream's work on it is done (desk review: NULL
 * stood for "unused", no event was recorded, and the next message, on
 * another stream, copied into the stage before the peer had read the
 * first one's data).  Rank 0 sends two pool buffers to rank 1, the first
 * on the NULL stream, the second on a non-blocking stream, both as the
 * first side (rank 1 posts its receives after a barrier); between
 * processes only.  Not run on a GPU when written. */
static void pool_default_stream(void) {
  int pair = nranks >= 2 && rank < 2 && comm->transport[1 - rank] == MPN_TRANSPORT_IPC;
  int both = 0;
  MPI_Allreduce(&pair, &both, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (both < 2) return;
  size_t bytes = (size_t)1 << 20; /* above the inboxes' sizes: the two-hop path */
  char *a = NULL, *b = NULL;
  if (rank == 0) {
    a = buf_alloc(BUF_POOL, bytes);
    b = buf_alloc(BUF_POOL, bytes);
    pattern_fill(a, bytes, seed_of(0, 1, 6200), stream);
    pattern_fill(b, bytes, seed_of(0, 1, 6201), stream);
  } else if (rank == 1) {
    a = dev_alloc(bytes);
    b = dev_alloc(bytes);
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaStream_t other = NULL;
  EXPECT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  if (rank == 0) {
    EXPECT_OK(ncclSend(a, bytes, ncclInt8, 1, comm, NULL));
    EXPECT_OK(ncclSend(b, bytes, ncclInt8, 1, comm, other));
    usleep(100 * 1000); /* both copies into stages have run */
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    EXPECT_OK(ncclRecv(a, bytes, ncclInt8, 0, comm, stream));
    EXPECT_OK(ncclRecv(b, bytes, ncclInt8, 0, comm, stream));
    expect_pattern(a, bytes, seed_of(0, 1, 6200), "pool send on the NULL stream");
    expect_pattern(b, bytes, seed_of(0, 1, 6201), "pool send on another stream after one on NULL");
  }
  EXPECT(cudaStreamSynchronize(NULL) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(other) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    buf_free(BUF_POOL, a);
    buf_free(BUF_POOL, b);
  } else if (rank == 1) {
    cudaFree(a);
    cudaFree(b);
  }
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(other);
}

/* Rank 1's receive of nothing from rank 0 (captured in a graph and
 * replayed once, if captured) must not complete while rank 0's stream is
 * still busy before its send of nothing: a kernel of 600 ms that starts
 * after the ranks met, against a look 100 ms after they met (with no
 * message, the receive's event would complete at once).  Not a host
 * function that waits for the host: a close of an IPC import waits for the
 * process's GPU work, and launches waited for closes (docs/P2P.md, known
 * problem 17; they wait 20 ms now).  The receive's pointer is one nothing
 * may read. */
static void held_sender(int captured) {
  int pair = nranks >= 2 && rank < 2, ready = 1, all = 0;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  void* never = (void*)(uintptr_t)0x1000;
  if (pair && captured) {
    EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    EXPECT_OK(rank == 0 ? ncclSend(NULL, 0, ncclInt8, 1, comm, stream) : ncclRecv(never, 0, ncclInt8, 0, comm, stream));
    ready = cudaStreamEndCapture(stream, &graph) == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    EXPECT(ready);
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Allreduce(&ready, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD); /* nobody replays alone; the ranks meet */
  if (pair && all && rank == 0) {
    gpu_busy(600000, stream);
    EXPECT(captured ? cudaGraphLaunch(exec, stream) == cudaSuccess
                    : ncclSend(NULL, 0, ncclInt8, 1, comm, stream) == ncclSuccess);
  } else if (pair && all) {
    cudaEvent_t received;
    EXPECT(cudaEventCreateWithFlags(&received, cudaEventDisableTiming) == cudaSuccess);
    EXPECT(captured ? cudaGraphLaunch(exec, stream) == cudaSuccess
                    : ncclRecv(never, 0, ncclInt8, 0, comm, stream) == ncclSuccess);
    EXPECT(cudaEventRecord(received, stream) == cudaSuccess);
    usleep(100000);
    EXPECT(cudaEventQuery(received) == cudaErrorNotReady); /* rank 0 has not sent yet */
    cudaGetLastError();
    cudaEventDestroy(received);
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
}

/* Messages of no bytes are messages, as in NCCL since 2.12.10: each takes
 * its place in the order of its pair (buffers may be NULL or point
 * anywhere; datatypes need not agree where there are no elements), and the
 * receiver's stream waits for the sender's (held_sender), also captured. */
static void empty_messages(void) {
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  size_t bytes = 4099;
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
  pattern_fill(s, bytes, seed_of(rank, to, 90), stream);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(NULL, 0, ncclFloat32, to, comm, stream));
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, to, comm, stream));
  EXPECT_OK(ncclSend(s, 0, ncclInt8, to, comm, stream));
  EXPECT_OK(ncclRecv(r, 0, ncclFloat32, from, comm, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, from, comm, stream));
  EXPECT_OK(ncclRecv(NULL, 0, ncclFloat64, from, comm, stream)); /* (no elements: any datatype agrees) */
  EXPECT_OK(ncclGroupEnd());
  expect_pattern(r, bytes, seed_of(from, rank, 90), "data between empty messages");
  ncclResult_t async = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess);
  held_sender(0);
  held_sender(1);
  cudaFree(s);
  cudaFree(r);
}

/* A freed buffer and a new one at the same address: the import cache notices. */
static void reallocated(void) {
  size_t bytes = 1 << 20;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  for (int round = 0; round < 3; round++) {
    char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
    pattern_fill(s, bytes, seed_of(rank, to, 50 + round), stream);
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(s, bytes, ncclInt8, to, comm, stream));
    EXPECT_OK(ncclRecv(r, bytes, ncclInt8, from, comm, stream));
    EXPECT_OK(ncclGroupEnd());
    expect_pattern(r, bytes, seed_of(from, rank, 50 + round), "re-allocated");
    cudaFree(s);
    cudaFree(r);
  }
}

/* Pinned host buffers (cudaHostAlloc) on either side of a ring, over UCX
 * only: UCX takes them unstaged (MPINCCL_UCX_DIRECT), cut like staged
 * messages, so a direct sender meets a staged receiver and the reverse;
 * sizes of more chunks than MPINCCL_UCX_DEPTH reuse the slots. */
static void host_buffers(void) {
  if (!harness_over_ucx()) return;
  static const size_t sizes[] = {8, (9 << 20) + 5, (40 << 20) + 1};
  for (int k = 0; k < 12; k++) {
    int host_send = (k + rank) & 1, host_recv = ((k >> 1) + rank) & 1;
    char what[32];
    snprintf(what, sizeof(what), "host buffers (case %d)", k);
    ring_kinds(sizes[k / 4], host_send ? BUF_HOST : BUF_DEVICE, host_recv ? BUF_HOST : BUF_DEVICE, 70 + k, what);
  }
}

/* The text of a mismatch of send_count and recv_count floats from rank 0 to
 * rank 1: over UCX, each side's (the sender's names the receiver's report:
 * a notice), from the receive's size and what came (ucx/net.c). */
static void mismatch_text(char* text, size_t n, size_t send_count, size_t recv_count) {
  if (!harness_over_ucx()) {
    snprintf(text, n, "ncclSend of %zu x ncclFloat32, ncclRecv of %zu x ncclFloat32", send_count, recv_count);
    return;
  }
  char came[48];
  if (send_count > recv_count)
    snprintf(came, sizeof(came), "more came");
  else
    snprintf(came, sizeof(came), "%zu came", send_count * sizeof(float));
  snprintf(text, n,
           "a message from rank 0 to rank 1 over UCX does not fit its receive%s: the ncclSend and ncclRecv "
           "differ in count or datatype (%zu bytes expected, %s)",
           rank == 0 ? " (rank 1's report)" : "", recv_count * sizeof(float), came);
}

/* One mismatched message between ranks 0 and 1 of pair: both sides hear of
 * it (over UCX the sender from the receiver, a moment later: waited for). */
static void mismatch_case(ncclComm_t pair, MPI_Comm two, float* buf, size_t send_count, size_t recv_count) {
  EXPECT_OK(ncclGroupStart());
  if (rank == 0) EXPECT_OK(ncclSend(buf, send_count, ncclFloat32, 1, pair, stream));
  else EXPECT_OK(ncclRecv(buf, recv_count, ncclFloat32, 0, pair, stream));
  EXPECT_OK(ncclGroupEnd());
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess); /* no hang */
  MPI_Barrier(two);
  ncclResult_t async = ncclSuccess;
  for (int waited = 0; waited < 30000; waited++) {
    EXPECT_OK(ncclCommGetAsyncError(pair, &async));
    if (async != ncclSuccess || !harness_over_ucx()) break;
    usleep(1000);
  }
  char text[320];
  mismatch_text(text, sizeof(text), send_count, recv_count);
  EXPECT(async == ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(pair), text) != NULL);
  if (!harness_over_ucx()) return;
  /* Over UCX the communicator is failed: a later send or receive is
   * refused with the same code as ncclCommGetAsyncError's. */
  ncclResult_t later =
      rank == 0 ? ncclSend(buf, 1, ncclFloat32, 1, pair, stream) : ncclRecv(buf, 1, ncclFloat32, 0, pair, stream);
  EXPECT(later == ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(pair), "an earlier transfer over UCX of this communicator failed") != NULL);
}

/* A receive whose count differs from the send: both sides hear of it, also
 * when the two sizes would take different paths (MPINCCL_EAGER_MAX, 4096
 * bytes; MPINCCL_EAGER_BIG_MAX, 385024: whichever side posts first decides).
 * Over UCX: a short and a long chunk, and one chunk against two, every one
 * full-size (the chunk tags' last bit shows it; MPINCCL_UCX_CHUNK bytes a
 * chunk, and up to MPINCCL_UCX_CHUNKS of them at that size: with one, two
 * chunk sizes are one chunk, too long or short, the same texts).  Each case
 * on a communicator of its own: a communicator's asynchronous error and its
 * text are its first failure's, and over UCX a mismatch leaves it failed. */
static void mismatch(void) {
  if (nranks < 2) return;
  MPI_Comm two;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
  if (rank > 1) return;
  int over = harness_over_ucx();
  size_t ch = over ? (size_t)mpn_param_int(MPN_PARAM_UCX_CHUNK) / sizeof(float) : 0;
  const size_t ucx[][2] = {{10, 12}, {12, 10}, {ch, 2 * ch}, {2 * ch, ch}, {0, 10}, {10, 0}};
  const size_t host[][2] = {{10, 12},      {0, 10},        /* a message of no bytes against one of some */
                            {10, 0},       {1000, 1250},   /* small ring against big ring */
                            {1250, 1000},  {96256, 96257}, /* big ring against the two-hop path */
                            {96257, 96256}};
  size_t most = 2 * ch > 96257 ? 2 * ch : 96257;
  float* buf = dev_alloc(most * sizeof(float));
  for (int i = 0; i < (over ? 6 : 7); i++) {
    ncclComm_t pair = NULL;
    EXPECT_OK(mpincclCommInitMPI(&pair, two, NULL));
    mismatch_case(pair, two, buf, over ? ucx[i][0] : host[i][0], over ? ucx[i][1] : host[i][1]);
    MPI_Barrier(two); /* nobody closes endpoints the other still uses */
    EXPECT_OK(ncclCommDestroy(pair));
  }
  cudaFree(buf);
  MPI_Comm_free(&two);
}

int main(int argc, char** argv) {
  int started = harness_start(argc, argv, "test_p2p", "1 2 3 4 8", "TEST_P2P", 0);
  if (started >= 0) return started;
  static const size_t sizes[] = {1, 7, 4099, (1 << 20) + 5, 64 << 20};
  STEP(for (int i = 0; i < 5; i++) ring(sizes[i], 1, ncclInt8, 0));
  STEP(for (int t = 0; t < ncclNumTypes; t++) ring(1001 * 8, 1, (ncclDataType_t)t, (size_t)t * 3));
  STEP(if (nranks <= 2) ring((size_t)1 << 30, 1, ncclFloat32, 0));
  STEP(ring(12345, 0, ncclInt8, 1)); /* to self */
  STEP(all_to_all(4096));
  STEP(pool_buffers());
  STEP(pool_default_stream());
  STEP(host_buffers());
  STEP(scatter_gather(100000));
  STEP(empty_messages());
  STEP(same_peer_order());
  STEP(split_launches());
  STEP(chain_three());
  STEP(many_small());
  STEP(host_ahead());
  STEP(streams_wrap());
  STEP(big_inbox());
  STEP(sliced_inbox());
  STEP(sliced_pair());
  STEP(grid_copies());
  STEP(push_own());
  STEP(if (!harness_over_ucx()) group_limit());
  STEP(reallocated());
  STEP(two_comms());
  STEP(init_all_ring());
  STEP(init_all_devices());
  STEP(threads_ring());
  STEP(threads_late_second_side());
  STEP(halo26(0, 65536));
  STEP(halo26_wide());
  STEP(graph_replay());
  STEP(graph_small());
  STEP(graph_halo());
  STEP(graph_recapture());
  STEP(graph_new_buffers());
  STEP(graph_outlives_comm());
  STEP(graph_pool_stage());
  STEP(graph_two_streams());
  STEP(graph_same_capture());
  STEP(graph_group_limit());
  STEP(sender_gone_first());
  STEP(self_pairs_freed());
  STEP(sender_gone_loop());
  STEP(mismatch());
  STEP(short_buffer());
  STEP(short_here());
  STEP(other_memory());
  STEP(vmm_buffers());
  STEP(in_the_way());
  STEP(beside_a_close());
  return harness_finish();
}
