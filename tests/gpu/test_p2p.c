/*
 * test_p2p.c - ncclSend/ncclRecv between ranks sharing a GPU (run under
 * mpirun with 1 to 8 processes) and between ranks of one process: group
 * patterns, sizes, datatypes, offsets, memory kinds, re-allocated buffers,
 * several communicators at once, split launches and chains through three
 * processes, CUDA graphs and mismatched counts; the protocol's paths are
 * in test_p2p_paths.c.  Every received byte is checked against the pattern
 * its sender wrote.  Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/param.h"
#include "core/topo.h"
#include "harness.h"
#include "mpinccl.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "p2p/stage.h"
#include "pattern.h"
#include "test_p2p.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/graph.h"
#endif

void* dev_alloc(size_t bytes) {
  void* p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    fprintf(stderr, "[rank %d] cudaMalloc(%zu) failed\n", rank, bytes);
    exit(1);
  }
  return p;
}

/* Each rank sends to rank+shift and receives from rank-shift, in one group. */
static void ring(size_t bytes, int shift, ncclDataType_t type, size_t offset) {
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

/* Where a test buffer comes from. */
typedef enum { BUF_DEVICE, BUF_POOL, BUF_HOST } buf_kind_t;

static char* buf_alloc(buf_kind_t kind, size_t bytes) {
  char* p = NULL;
  if (kind == BUF_POOL) EXPECT(cudaMallocAsync((void**)&p, bytes, stream) == cudaSuccess);
  else if (kind == BUF_HOST) EXPECT(cudaHostAlloc((void**)&p, bytes, cudaHostAllocDefault) == cudaSuccess);
  else p = dev_alloc(bytes);
  return p;
}

static void buf_free(buf_kind_t kind, char* p) {
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

/* Everybody to everybody (self included) in one group; sizes differ per pair. */
static void all_to_all(size_t base) {
  char **s = calloc(nranks, sizeof(char*)), **r = calloc(nranks, sizeof(char*));
  for (int p = 0; p < nranks; p++) {
    s[p] = dev_alloc(base + rank * 3 + p);
    r[p] = dev_alloc(base + p * 3 + rank);
    pattern_fill(s[p], base + rank * 3 + p, seed_of(rank, p, 7), stream);
  }
  EXPECT_OK(ncclGroupStart());
  for (int p = 0; p < nranks; p++) {
    EXPECT_OK(ncclRecv(r[p], base + p * 3 + rank, ncclUint8, p, comm, stream));
    EXPECT_OK(ncclSend(s[p], base + rank * 3 + p, ncclUint8, p, comm, stream));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int p = 0; p < nranks; p++) {
    expect_pattern(r[p], base + p * 3 + rank, seed_of(p, rank, 7), "all-to-all");
    cudaFree(s[p]);
    cudaFree(r[p]);
  }
  free(s);
  free(r);
}

/* Root 0 scatters, then gathers; plus null peers and empty messages. */
static void scatter_gather(size_t bytes) {
  char* mine = dev_alloc(bytes);
  char** all = calloc(nranks, sizeof(char*));
  if (rank == 0)
    for (int p = 0; p < nranks; p++) {
      all[p] = dev_alloc(bytes);
      pattern_fill(all[p], bytes, seed_of(0, p, 3), stream);
    }
  EXPECT_OK(ncclGroupStart());
  if (rank == 0)
    for (int p = 0; p < nranks; p++) EXPECT_OK(ncclSend(all[p], bytes, ncclInt8, p, comm, stream));
  EXPECT_OK(ncclRecv(mine, bytes, ncclInt8, 0, comm, stream));
  EXPECT_OK(ncclSend(mine, 5, ncclInt8, MPINCCL_PROC_NULL, comm, stream));
  EXPECT_OK(ncclSend(NULL, 0, ncclInt8, (rank + nranks - 1) % nranks, comm, stream));
  EXPECT_OK(ncclRecv(NULL, 0, ncclInt8, (rank + 1) % nranks, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  expect_pattern(mine, bytes, seed_of(0, rank, 3), "scatter");
  pattern_fill(mine, bytes, seed_of(rank, 0, 4), stream);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(mine, bytes, ncclInt8, 0, comm, stream));
  if (rank == 0)
    for (int p = 0; p < nranks; p++) EXPECT_OK(ncclRecv(all[p], bytes, ncclInt8, p, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  if (rank == 0)
    for (int p = 0; p < nranks; p++) {
      expect_pattern(all[p], bytes, seed_of(p, 0, 4), "gather");
      cudaFree(all[p]);
    }
  cudaFree(mine);
  free(all);
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

/* Several messages to the same peer in one group arrive in program order. */
static void same_peer_order(void) {
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  size_t sizes[3] = {1000, 17, 65536};
  char *s[3], *r[3];
  for (int k = 0; k < 3; k++) {
    s[k] = dev_alloc(sizes[k]);
    r[k] = dev_alloc(sizes[k]);
    pattern_fill(s[k], sizes[k], seed_of(rank, to, 100 + k), stream);
  }
  EXPECT_OK(ncclGroupStart());
  for (int k = 0; k < 3; k++) EXPECT_OK(ncclSend(s[k], sizes[k], ncclChar, to, comm, stream));
  for (int k = 0; k < 3; k++) EXPECT_OK(ncclRecv(r[k], sizes[k], ncclChar, from, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  for (int k = 0; k < 3; k++) {
    expect_pattern(r[k], sizes[k], seed_of(from, rank, 100 + k), "order");
    cudaFree(s[k]);
    cudaFree(r[k]);
  }
}

/*
 * A group against separate launches (docs/P2P.md, known problem 8): one
 * rank of each pair (rank ^ 1; an odd last rank sits out) posts its receive
 * and its send as two launches on one stream, each alone, before the other
 * posts both in one group.  The rank of the group moves both messages, and
 * the early rank's second "ready" comes only once its first launch
 * completed, which needs that rank's first copy: it must not wait for both
 * before copying.  Both orders, each rank of the pair early in turn, then
 * the receive and the send on two communicators (the group spans both);
 * messages above the inbox sizes, so they take the two-hop handshake.
 */
static void split_launches(void) {
  enum { BYTES = 600001, ROUNDS = 6 };
  ncclComm_t other;
  EXPECT_OK(ncclCommSplit(comm, 0, rank, &other, NULL));
  int peer = rank ^ 1;
  char *s = dev_alloc(BYTES), *r = dev_alloc(BYTES);
  for (int round = 0; round < ROUNDS && peer < nranks; round++) {
    int two_comms = round >= 4; /* the receive on comm, the send on other */
    int early = (rank & 1) == (two_comms ? round & 1 : (round >> 1) & 1);
    int recv_first = two_comms || (round & 1) == 0;
    pattern_fill(s, BYTES, seed_of(rank, peer, 12000 + round), stream);
    EXPECT(cudaMemsetAsync(r, 0, BYTES, stream) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    if (early) {
      if (recv_first) EXPECT_OK(ncclRecv(r, BYTES, ncclInt8, peer, comm, stream));
      EXPECT_OK(ncclSend(s, BYTES, ncclInt8, peer, two_comms ? other : comm, stream));
      if (!recv_first) EXPECT_OK(ncclRecv(r, BYTES, ncclInt8, peer, comm, stream));
      MPI_Send(&round, 1, MPI_INT, peer, 700 + round, MPI_COMM_WORLD); /* both posted */
    } else {
      int posted = -1;
      MPI_Recv(&posted, 1, MPI_INT, peer, 700 + round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      EXPECT(posted == round);
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(s, BYTES, ncclInt8, peer, comm, stream));
      EXPECT_OK(ncclRecv(r, BYTES, ncclInt8, peer, two_comms ? other : comm, stream));
      EXPECT_OK(ncclGroupEnd());
    }
    char what[80];
    snprintf(what, sizeof(what), "split_launches round %d (%s, %s first)", round, early ? "early" : "group",
             recv_first ? "receive" : "send");
    expect_pattern(r, BYTES, seed_of(peer, rank, 12000 + round), what);
  }
  cudaFree(s);
  cudaFree(r);
  EXPECT_OK(ncclCommDestroy(other));
}

/*
 * A chain through three processes that the receiver's group must not block
 * (docs/P2P.md, known problem 8): rank 1 sends to rank 0 twice, in launches
 * of their own, then to rank 2; rank 2 receives that, then sends to rank
 * 0; rank 0 receives all three in one group posted last, so it moves them
 * all.  Rank 2's send is ready only once rank 1's second send is done,
 * which needs rank 0's copy: a rank 0 that waited for rank 2's send
 * together with rank 1's first, before copying, would hang.  Messages
 * above the inbox sizes, so they take the two-hop handshake.
 */
static void chain_three(void) {
  enum { BYTES = 1 << 20, ROUNDS = 3 };
  char *a = dev_alloc(BYTES), *b = dev_alloc(BYTES), *c = dev_alloc(BYTES);
  for (int round = 0; round < ROUNDS && nranks >= 3; round++) {
    uint32_t k = 13000 + 10 * (uint32_t)round;
    EXPECT(cudaMemsetAsync(a, 0, BYTES, stream) == cudaSuccess);
    EXPECT(cudaMemsetAsync(b, 0, BYTES, stream) == cudaSuccess);
    EXPECT(cudaMemsetAsync(c, 0, BYTES, stream) == cudaSuccess);
    if (rank == 1) {
      pattern_fill(a, BYTES, seed_of(1, 0, k), stream);
      pattern_fill(b, BYTES, seed_of(1, 0, k + 1), stream);
      pattern_fill(c, BYTES, seed_of(1, 2, k + 2), stream);
    }
    if (rank == 2) pattern_fill(b, BYTES, seed_of(2, 0, k + 3), stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
      EXPECT_OK(ncclSend(a, BYTES, ncclInt8, 0, comm, stream));
      EXPECT_OK(ncclSend(b, BYTES, ncclInt8, 0, comm, stream));
      EXPECT_OK(ncclSend(c, BYTES, ncclInt8, 2, comm, stream));
    }
    if (rank == 2) {
      EXPECT_OK(ncclRecv(a, BYTES, ncclInt8, 1, comm, stream));
      EXPECT_OK(ncclSend(b, BYTES, ncclInt8, 0, comm, stream));
    }
    MPI_Barrier(MPI_COMM_WORLD); /* ranks 1 and 2 posted first */
    if (rank == 0) {
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclRecv(a, BYTES, ncclInt8, 1, comm, stream));
      EXPECT_OK(ncclRecv(b, BYTES, ncclInt8, 1, comm, stream));
      EXPECT_OK(ncclRecv(c, BYTES, ncclInt8, 2, comm, stream));
      EXPECT_OK(ncclGroupEnd());
      expect_pattern(a, BYTES, seed_of(1, 0, k), "chain_three: rank 1's first");
      expect_pattern(b, BYTES, seed_of(1, 0, k + 1), "chain_three: rank 1's second");
      expect_pattern(c, BYTES, seed_of(2, 0, k + 3), "chain_three: rank 2's");
    }
    if (rank == 2) expect_pattern(a, BYTES, seed_of(1, 2, k + 2), "chain_three: rank 1's to rank 2");
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  cudaFree(a), cudaFree(b), cudaFree(c);
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

/* Two communicators, two streams, opposite directions, in flight together. */
static void two_comms(void) {
  ncclComm_t other;
  EXPECT_OK(ncclCommSplit(comm, 0, rank, &other, NULL));
  cudaStream_t s2;
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  size_t bytes = 3 << 20;
  int right = (rank + 1) % nranks, left = (rank + nranks - 1) % nranks;
  char *a = dev_alloc(bytes), *b = dev_alloc(bytes), *ra = dev_alloc(bytes), *rb = dev_alloc(bytes);
  pattern_fill(a, bytes, seed_of(rank, right, 60), stream);
  pattern_fill(b, bytes, seed_of(rank, left, 61), s2);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(a, bytes, ncclInt8, right, comm, stream));
  EXPECT_OK(ncclRecv(ra, bytes, ncclInt8, left, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(b, bytes, ncclInt8, left, other, s2));
  EXPECT_OK(ncclRecv(rb, bytes, ncclInt8, right, other, s2));
  EXPECT_OK(ncclGroupEnd());
  cudaStreamSynchronize(s2);
  expect_pattern(ra, bytes, seed_of(left, rank, 60), "two comms (first)");
  expect_pattern(rb, bytes, seed_of(right, rank, 61), "two comms (second)");
  cudaFree(a), cudaFree(b), cudaFree(ra), cudaFree(rb);
  cudaStreamDestroy(s2);
  EXPECT_OK(ncclCommDestroy(other));
}

/* Ranks of one process: ncclCommInitAll with a repeated device, one thread. */
static void init_all_ring(void) {
  enum { N = 3 };
  ncclComm_t comms[N];
  harness_init_all_here(comms, N);
  size_t bytes = 777777;
  char *s[N], *r[N];
  for (int i = 0; i < N; i++) {
    s[i] = dev_alloc(bytes);
    r[i] = dev_alloc(bytes);
    pattern_fill(s[i], bytes, seed_of(i, (i + 1) % N, 70), stream);
  }
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < N; i++) { /* (each ring message after one of no bytes) */
    EXPECT_OK(ncclSend(NULL, 0, ncclInt8, (i + 1) % N, comms[i], stream));
    EXPECT_OK(ncclSend(s[i], bytes, ncclInt8, (i + 1) % N, comms[i], stream));
    EXPECT_OK(ncclRecv(NULL, 0, ncclInt8, (i + N - 1) % N, comms[i], stream));
    EXPECT_OK(ncclRecv(r[i], bytes, ncclInt8, (i + N - 1) % N, comms[i], stream));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int i = 0; i < N; i++) {
    expect_pattern(r[i], bytes, seed_of((i + N - 1) % N, i, 70), "InitAll ring");
    cudaFree(s[i]);
    cudaFree(r[i]);
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
}

/*
 * Ranks of one process on every GPU (ncclCommInitAll, two per GPU, up to
 * 8), one thread, a ring in one group on a default stream handle, which
 * names another stream on each device: the legacy stream, then the
 * per-thread one.  Each device's messages must come after what its default
 * stream did before (clearing the receive buffers, filling the send ones)
 * and before what it does next (the check).  Held back 50 ms first: the
 * first GPU's stream (work of another GPU issued there would come after
 * that GPU's check), then the other GPUs' (their messages' work started
 * early would come before their clears and fills).  Rank 0 only; with one
 * GPU there is nothing to tell apart.
 */
static void init_all_devices(void) {
  enum { MAX = 8 };
  int dev, devs[MAX];
  ncclComm_t comms[MAX];
  cudaGetDevice(&dev);
  int n = harness_init_all_devices("test_p2p: init_all_devices", comms, devs, MAX);
  if (n == 0) return;
  /* 1 MiB, below the size whose copies between GPUs go to lanes, then
   * 6 MiB, whose copies take the lanes forked from an alias stream. */
  size_t most = (size_t)6 << 20;
  char *s[MAX], *r[MAX];
  for (int i = 0; i < n; i++) {
    cudaSetDevice(devs[i]);
    s[i] = dev_alloc(most);
    r[i] = dev_alloc(most);
  }
  for (int round = 0; round < 8; round++) {
    size_t bytes = round < 4 ? (size_t)1 << 20 : most;
    cudaStream_t h = round % 2 == 0 ? (cudaStream_t)0 : cudaStreamPerThread;
    harness_hold_devices(devs[0], round % 4 >= 2, h);
    for (int i = 0; i < n; i++) {
      cudaSetDevice(devs[i]);
      cudaMemsetAsync(r[i], 0, bytes, h);
      pattern_fill(s[i], bytes, seed_of(i, (i + 1) % n, 80 + round), h);
    }
    EXPECT_OK(ncclGroupStart());
    for (int i = 0; i < n; i++) {
      EXPECT_OK(ncclSend(s[i], bytes, ncclInt8, (i + 1) % n, comms[i], h));
      EXPECT_OK(ncclRecv(r[i], bytes, ncclInt8, (i + n - 1) % n, comms[i], h));
    }
    EXPECT_OK(ncclGroupEnd());
    for (int k = 0; k < n; k++) {
      int i = harness_device_order(devs, n, k, 0);
      cudaSetDevice(devs[i]);
      unsigned long long bad = pattern_check(r[i], bytes, seed_of((i + n - 1) % n, i, 80 + round), h);
      if (bad)
        fprintf(stderr, "[rank %d] init_all_devices round %d: comm %d (GPU %d) got %llu of %zu bytes wrong\n", rank,
                round, i, devs[i], bad, bytes);
      EXPECT(bad == 0);
    }
  }
  for (int i = 0; i < n; i++) {
    cudaSetDevice(devs[i]);
    cudaDeviceSynchronize();
    cudaFree(s[i]);
    cudaFree(r[i]);
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
  cudaSetDevice(dev);
}

/* One group of c on the test stream: bytes from s to rank `to`, into r from
 * rank `from`; ncclGroupEnd's result. */
static ncclResult_t ring_group(ncclComm_t c, const char* s, char* r, size_t bytes, int to, int from) {
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, to, c, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, from, c, stream));
  return ncclGroupEnd();
}

/* A ring captured in a CUDA graph, replayed 100 times with new data each time. */
static void graph_replay(void) {
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
static void graph_small(void) {
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

/* More captured messages of a pair than it has graph slots (256), in
 * graphs each destroyed after one replay: the slots come back (before, the
 * 257th capture was refused). */
static void graph_recapture(void) {
  size_t bytes = 4096;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks, bad = 0, failed = 0;
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
  for (int k = 0; k < 300 && !failed; k++) {
    pattern_fill(s, bytes, seed_of(rank, to, 5000 + k), stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    ncclResult_t res = ring_group(comm, s, r, bytes, to, from);
    int captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
    int ready = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
    if (res != ncclSuccess || !ready) {
      fprintf(stderr, "[rank %d] capture %d: %s (%s)\n", rank, k, ncclGetErrorString(res), ncclGetLastError(comm));
      failed = 1;
    } else {
      EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
      bad += pattern_check(r, bytes, seed_of(from, rank, 5000 + k), stream) != 0;
      cudaGraphExecDestroy(exec);
    }
    if (captured) cudaGraphDestroy(graph);
    cudaGetLastError();
    MPI_Barrier(MPI_COMM_WORLD); /* nobody refills its send buffer before its peer has read it */
  }
  EXPECT(!failed);
  EXPECT(bad == 0);
#ifdef HAVE_UCX
  if (harness_over_ucx()) { /* their staging goes once the graph is gone (ucx/graph.c) */
    int live = mpn_ucx_graph_groups(comm);
    printf("test_p2p: [rank %d] captured groups over UCX still held after 300 captures: %d\n", rank, live);
    EXPECT(live <= 16);
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

/* One capture needing more than a pair's 256 graph slots: the 257th
 * message finds its slot held by a message of the same capture, which no
 * wait can free; it is refused at once and both communicators are failed. */
static void graph_same_capture(void) {
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
static void graph_group_limit(void) {
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

/*
 * A sender that destroys its communicator before its receiver posted: a
 * one-hop message (the inbox, under MPS or with several processes on a
 * time-sliced GPU) is done on the sender's side at once, in the pair that
 * the sender made; the destroy freed it, and the late receiver mapped a
 * freed block or made a new pair and waited for good (seen once in
 * make check as "cudaIpcOpenMemHandle failed ...").  Rank 0 sends to rank
 * 1, which posts 200 ms later (where the message takes two hops, rank 0's
 * destroy waits for it).
 */
static void sender_gone_first(void) {
  if (nranks < 2 || harness_over_ucx()) return;
  ncclComm_t c = NULL;
  EXPECT_OK(mpincclCommInitMPI(&c, MPI_COMM_WORLD, NULL));
  if (c == NULL) return;
  size_t bytes = 4096;
  char* buf = dev_alloc(bytes);
  if (rank == 0) {
    pattern_fill(buf, bytes, seed_of(0, 1, 6200), stream);
    EXPECT_OK(ncclSend(buf, bytes, ncclInt8, 1, c, stream));
    EXPECT_OK(ncclCommDestroy(c));
  } else if (rank == 1) {
    usleep(200000);
    cudaMemsetAsync(buf, 0, bytes, stream);
    EXPECT_OK(ncclRecv(buf, bytes, ncclInt8, 0, c, stream));
    expect_pattern(buf, bytes, seed_of(0, 1, 6200), "from a sender whose communicator was destroyed first");
    EXPECT_OK(ncclCommDestroy(c));
  } else {
    EXPECT_OK(ncclCommDestroy(c));
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  cudaFree(buf);
}

/* A rank's pair with itself, which no other process opens, goes with its
 * communicator: file and device block (before, each communicator left its
 * self pair in /dev/shm and 2 MiB of device flags until the process
 * exited, as if kept for a peer of another process). */
static void self_pairs_freed(void) {
  int kept_before = mpn_pair_kept();
  size_t bytes = 4096;
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
  for (int i = 0; i < 20; i++) {
    ncclComm_t c = NULL;
    EXPECT_OK(mpincclCommInitMPI(&c, MPI_COMM_SELF, NULL));
    if (c == NULL) break;
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/mpinccl-%016llx-0-0", (unsigned long long)c->bootstrap->key);
    pattern_fill(s, bytes, seed_of(rank, rank, 6300 + i), stream);
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(s, bytes, ncclInt8, 0, c, stream));
    EXPECT_OK(ncclRecv(r, bytes, ncclInt8, 0, c, stream));
    EXPECT_OK(ncclGroupEnd());
    expect_pattern(r, bytes, seed_of(rank, rank, 6300 + i), "to itself");
    EXPECT_OK(ncclCommDestroy(c));
    int left = access(path, F_OK) == 0;
    if (left) fprintf(stderr, "[rank %d] %s is still there\n", rank, path);
    EXPECT(!left);
  }
  EXPECT(mpn_pair_kept() <= kept_before); /* (a pair kept before may have been taken since) */
  cudaFree(s);
  cudaFree(r);
}

/* sender_gone_first in a loop: the pairs kept for the late receiver are
 * freed at a later destroy once it took them, so the sender holds only
 * the last communicator's (before, one device block per communicator
 * until exit). */
static void sender_gone_loop(void) {
  if (nranks < 2 || harness_over_ucx()) return;
  int kept_before = mpn_pair_kept();
  size_t bytes = 4096;
  char* buf = dev_alloc(bytes);
  for (int i = 0; i < 10; i++) {
    ncclComm_t c = NULL;
    EXPECT_OK(mpincclCommInitMPI(&c, MPI_COMM_WORLD, NULL));
    if (c == NULL) break;
    if (rank == 0) {
      pattern_fill(buf, bytes, seed_of(0, 1, 6400 + i), stream);
      EXPECT_OK(ncclSend(buf, bytes, ncclInt8, 1, c, stream));
      EXPECT_OK(ncclCommDestroy(c));
    } else if (rank == 1) {
      usleep(50000);
      EXPECT_OK(ncclRecv(buf, bytes, ncclInt8, 0, c, stream));
      expect_pattern(buf, bytes, seed_of(0, 1, 6400 + i), "from a sender gone first, in a loop");
      EXPECT_OK(ncclCommDestroy(c));
    } else {
      EXPECT_OK(ncclCommDestroy(c));
    }
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (rank == 0) EXPECT(mpn_pair_kept() <= kept_before + 2); /* the last one's two directions */
  cudaFree(buf);
}

/* A send from a memory-pool buffer captured as the first side takes a stage
 * the graph keeps; once the graph is destroyed the stage serves again
 * (before, it stayed pinned for good).  Rank 0 captures its send first,
 * rank 1 its receive after a barrier; between processes only. */
static void graph_pool_stage(void) {
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

/* The group of halo26: towards direction d, from the neighbour at -d. */
static ncclResult_t halo26_group(char** s, char** r, const int* peer, const size_t* bytes) {
  EXPECT_OK(ncclGroupStart());
  for (int d = 0; d < 27; d++) {
    if (d == 13) continue;
    EXPECT_OK(ncclSend(s[d], bytes[d], ncclInt8, peer[d], comm, stream));
    EXPECT_OK(ncclRecv(r[26 - d], bytes[d], ncclInt8, peer[26 - d], comm, stream));
  }
  return ncclGroupEnd();
}

/* halo26's group captured in a CUDA graph and replayed `replays` times,
 * new data each time; the number of replays whose data came wrong. */
static int halo26_replays(char** s, char** r, const int* peer, const size_t* bytes, const int* src, int replays) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  EXPECT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  EXPECT_OK(halo26_group(s, r, peer, bytes));
  int captured = cudaStreamEndCapture(stream, &graph) == cudaSuccess;
  int ready = captured && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess, all_ready = 0;
  EXPECT(ready);
  MPI_Allreduce(&ready, &all_ready, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD); /* a replay alone would wait for ever */
  int bad = 0;
  for (int k = 0; all_ready && k < replays; k++) {
    for (int d = 0; d < 27; d++)
      if (d != 13) pattern_fill(s[d], bytes[d], seed_of(rank, d, 600 + k), stream);
    EXPECT(cudaGraphLaunch(exec, stream) == cudaSuccess);
    int wrong = 0;
    for (int d = 0; d < 27; d++)
      if (d != 13) wrong += pattern_check(r[26 - d], bytes[d], seed_of(src[d], d, 600 + k), stream) != 0;
    bad += wrong != 0;
    MPI_Barrier(MPI_COMM_WORLD); /* nobody refills a send buffer before its peer has read it */
  }
  if (ready) cudaGraphExecDestroy(exec);
  if (captured) cudaGraphDestroy(graph);
  cudaGetLastError();
  return bad;
}

/* 3D periodic decomposition, all 26 neighbours in one group; faces of
 * `face` bytes, edges of face / 32, corners of 64; buffers from
 * ncclMemAlloc, registered.  replays > 0: the group captured in a CUDA
 * graph, replayed that often (under MPS its kernel takes several blocks,
 * and its flags two rounds). */
static void halo26(int replays, size_t face) {
  int dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1}, coords[3];
  MPI_Dims_create(nranks, 3, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
  MPI_Cart_coords(cart, rank, 3, coords);
  char *s[27], *r[27];
  int peer[27];
  size_t bytes[27];
  void* handles[54];
  int nh = 0;
  for (int d = 0; d < 27; d++) {
    int off[3] = {d / 9 - 1, (d / 3) % 3 - 1, d % 3 - 1}, c[3];
    int nonzero = (off[0] != 0) + (off[1] != 0) + (off[2] != 0);
    for (int k = 0; k < 3; k++) c[k] = coords[k] + off[k];
    MPI_Cart_rank(cart, c, &peer[d]);
    bytes[d] = nonzero == 1 ? face : nonzero == 2 ? face / 32 : 64;
    if (d == 13) continue;
    EXPECT_OK(ncclMemAlloc((void**)&s[d], bytes[d]));
    EXPECT_OK(ncclMemAlloc((void**)&r[d], bytes[d]));
    EXPECT((uintptr_t)s[d] % NCCL_WIN_REQUIRED_ALIGNMENT == 0);
    EXPECT_OK(ncclCommRegister(comm, s[d], bytes[d], &handles[nh++]));
    EXPECT_OK(ncclCommRegister(comm, r[d], bytes[d], &handles[nh++]));
    pattern_fill(s[d], bytes[d], seed_of(rank, d, 500), stream);
  }
  /* Send towards direction d; the data from the neighbour at -d arrives
   * in r[26 - d]... i.e. receive from direction 26 - d what it sent to d. */
  int src[27];
  for (int d = 0; d < 27; d++)
    MPI_Cart_rank(cart, (int[]){coords[0] - (d / 9 - 1), coords[1] - ((d / 3) % 3 - 1), coords[2] - (d % 3 - 1)},
                  &src[d]);
  if (replays > 0) {
    int bad = halo26_replays(s, r, peer, bytes, src, replays);
    if (bad) fprintf(stderr, "[rank %d] halo26: %d of %d replays received wrong data\n", rank, bad, replays);
    EXPECT(bad == 0);
  } else {
    EXPECT_OK(halo26_group(s, r, peer, bytes));
    for (int d = 0; d < 27; d++)
      if (d != 13) expect_pattern(r[26 - d], bytes[d], seed_of(src[d], d, 500), "halo26");
  }
  for (int i = 0; i < nh; i++) EXPECT_OK(ncclCommDeregister(comm, handles[i]));
  for (int d = 0; d < 27; d++)
    if (d != 13) {
      EXPECT_OK(ncclMemFree(s[d]));
      EXPECT_OK(ncclMemFree(r[d]));
    }
  MPI_Comm_free(&cart);
}

/* halo26 in a CUDA graph, replayed 20 times. */
static void graph_halo(void) { halo26(20, 65536); }

/* halo26 with faces of 256 KiB: each half of the group copies more than a
 * kernel of one block takes, so under MPS its kernels have several blocks
 * or, where none are free, it takes memory operations and the engines. */
static void halo26_wide(void) { halo26(0, 262144); }

/* Ranks of one process driven by one thread each. */
typedef struct {
  ncclComm_t comm;
  int me, n, dev, bad;
  pthread_barrier_t* sync; /* all threads of the process, see thread_ring */
  volatile int stage;      /* where the thread is, 10 * round + step, for a hang report */
} thread_arg_t;

static void* thread_ring(void* p) {
  thread_arg_t* a = p;
  cudaSetDevice(a->dev);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  size_t bytes = 1 << 18;
  char *s, *r;
  cudaMalloc((void**)&s, bytes);
  cudaMalloc((void**)&r, bytes);
  pattern_check(r, 0, 0, st); /* allocates this thread's counter */
  /* CUDA calls that may synchronize the device (cudaMalloc, cudaFree) must
   * not run while another thread of the process still has to enqueue the
   * match of a message this process's streams wait for. */
  pthread_barrier_wait(a->sync);
  for (int k = 0; k < 20; k++) {
    a->stage = 10 * k + 1;
    pattern_fill(s, bytes, seed_of(a->me, 0, 900 + k), st);
    a->stage = 10 * k + 2;
    ncclGroupStart();
    ncclSend(s, bytes, ncclInt8, (a->me + 1) % a->n, a->comm, st);
    ncclRecv(r, bytes, ncclInt8, (a->me + a->n - 1) % a->n, a->comm, st);
    a->bad += ncclGroupEnd() != ncclSuccess;
    a->stage = 10 * k + 3;
    a->bad += pattern_check(r, bytes, seed_of((a->me + a->n - 1) % a->n, 0, 900 + k), st) != 0;
    a->stage = 10 * k + 4;
    cudaStreamSynchronize(st); /* the peer thread has read s before it changes */
    a->stage = 10 * k + 5;
    ncclGroupStart(); /* an empty exchange as a barrier between the threads */
    ncclSend(s, 1, ncclInt8, (a->me + 1) % a->n, a->comm, st);
    ncclRecv(r, 1, ncclInt8, (a->me + a->n - 1) % a->n, a->comm, st);
    ncclGroupEnd();
    a->stage = 10 * k + 6;
    cudaStreamSynchronize(st);
  }
  a->stage = 1000;
  /* cudaFree synchronizes the device: only once no thread has messages left to post. */
  pthread_barrier_wait(a->sync);
  cudaFree(s);
  cudaFree(r);
  cudaStreamDestroy(st);
  return NULL;
}

static void threads_ring(void) {
  enum { N = 3 };
  int dev;
  cudaGetDevice(&dev);
  ncclComm_t comms[N];
  harness_init_all_here(comms, N);
  pthread_t t[N];
  thread_arg_t args[N];
  pthread_barrier_t sync;
  pthread_barrier_init(&sync, NULL, N);
  for (int i = 0; i < N; i++) {
    args[i] = (thread_arg_t){comms[i], i, N, dev, 0, &sync, 0};
    pthread_create(&t[i], NULL, thread_ring, &args[i]);
  }
  /* A hang is reported with where each thread stands, then the job ends. */
  for (int waited = 0;; waited++) {
    int finished = 0;
    for (int i = 0; i < N; i++) finished += args[i].stage == 1000;
    if (finished == N) break;
    if (waited == 600) {
      fprintf(stderr, "[rank %d] threads_ring hangs; stages (10 x round + step):", rank);
      for (int i = 0; i < N; i++) fprintf(stderr, " %d", args[i].stage);
      fprintf(stderr, "\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    usleep(50000);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    EXPECT(args[i].bad == 0);
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
  pthread_barrier_destroy(&sync);
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
 * chunk sizes are one chunk, too long or short, the same texts); each case
 * on a communicator of its own, which a mismatch over UCX leaves failed. */
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
  ncclComm_t pair = NULL;
  for (int i = 0; i < (over ? 6 : 7); i++) {
    if (pair == NULL) EXPECT_OK(mpincclCommInitMPI(&pair, two, NULL));
    mismatch_case(pair, two, buf, over ? ucx[i][0] : host[i][0], over ? ucx[i][1] : host[i][1]);
    if (over) {
      MPI_Barrier(two); /* nobody closes endpoints the other still uses */
      EXPECT_OK(ncclCommDestroy(pair));
      pair = NULL;
    }
  }
  if (pair) EXPECT_OK(ncclCommDestroy(pair));
  cudaFree(buf);
  MPI_Comm_free(&two);
}

int main(int argc, char** argv) {
  int started = harness_start(argc, argv, "test_p2p", "1 2 3 4 8", "TEST_P2P_ONLY", 0);
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
  STEP(halo26(0, 65536));
  STEP(halo26_wide());
  STEP(graph_replay());
  STEP(graph_small());
  STEP(graph_halo());
  STEP(graph_recapture());
  STEP(graph_pool_stage());
  STEP(graph_same_capture());
  STEP(graph_group_limit());
  STEP(sender_gone_first());
  STEP(self_pairs_freed());
  STEP(sender_gone_loop());
  STEP(mismatch());
  STEP(short_buffer());
  STEP(short_here());
  STEP(other_memory());
  STEP(in_the_way());
  STEP(beside_a_close());
  return harness_finish();
}
