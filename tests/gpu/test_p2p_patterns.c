/*
 * test_p2p_patterns.c - test_p2p's steps for patterns of messages:
 * all-to-all, scatter and gather, several messages to one peer in order, a
 * group against separate launches, a chain through three processes, and
 * the 26-neighbour halo (also replayed in a CUDA graph).  Every received
 * byte is checked against its sender's pattern.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "mpinccl.h"
#include "pattern.h"
#include "test_p2p.h"

/* Everybody to everybody (self included) in one group; sizes differ per pair. */
void all_to_all(size_t base) {
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
void scatter_gather(size_t bytes) {
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

/* Several messages to the same peer in one group arrive in program order. */
void same_peer_order(void) {
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
void split_launches(void) {
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
void chain_three(void) {
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
void halo26(int replays, size_t face) {
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
void graph_halo(void) { halo26(20, 65536); }

/* halo26 with faces of 256 KiB: each half of the group copies more than a
 * kernel of one block takes, so under MPS its kernels have several blocks
 * or, where none are free, it takes memory operations and the engines. */
void halo26_wide(void) { halo26(0, 262144); }
