/*
 * test_rma_patterns.c - test_rma's steps for puts and signals in patterns:
 * puts from pinned host memory, ping-pong, barrier, one-sided all-to-all,
 * many puts then a signal, signals before their wait, signals to one peer
 * from two streams, a rank's signals to itself waited for from other
 * streams, and send/receive and RMA in one group.  Every byte put is
 * checked.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "mpinccl.h"
#include "pattern.h"
#include "test_rma.h"

/* Puts whose source is pinned host memory (over UCX they go unstaged,
 * MPINCCL_UCX_DIRECT); each rank puts into the next one's window. */
void host_source(void) {
  if (nranks < 2) return;
  size_t bytes = (9 << 20) + 3;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  void* buf;
  ncclWindow_t w = window(bytes, &buf);
  char* src = NULL;
  EXPECT(cudaHostAlloc((void**)&src, bytes, cudaHostAllocDefault) == cudaSuccess);
  for (int k = 0; k < 3; k++) {
    pattern_fill(src, bytes, seed_of(rank, to, 60 + k), stream);
    ncclWaitSignalDesc_t d = {1, from, 0, 0};
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclPutSignal(src, bytes, ncclInt8, to, w, 0, 0, 0, 0, comm, stream));
    EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
    EXPECT_OK(ncclGroupEnd());
    expect_pattern(buf, bytes, seed_of(from, rank, 60 + k), "put from pinned host memory");
    MPI_Barrier(MPI_COMM_WORLD); /* the next put overwrites what was checked */
  }
  window_free(w, buf);
  cudaFreeHost(src);
}

/* Ranks 0 and 1 bounce a buffer back and forth, checking it every time. */
void pingpong(size_t bytes) {
  if (nranks < 2) return;
  void* buf;
  ncclWindow_t w = window(2 * bytes, &buf);
  char* src = dev_alloc(bytes);
  for (int k = 0; k < 10 && rank < 2; k++) {
    if (rank == 0) {
      pattern_fill(src, bytes, seed_of(0, 1, k), stream);
      EXPECT_OK(ncclPutSignal(src, bytes, ncclInt8, 1, w, 0, 0, 0, 0, comm, stream));
      ncclWaitSignalDesc_t d = {1, 1, 0, 0};
      EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
      expect_pattern((char*)buf + bytes, bytes, seed_of(0, 1, k), "ping-pong back");
    } else {
      ncclWaitSignalDesc_t d = {1, 0, 0, 0};
      EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
      expect_pattern(buf, bytes, seed_of(0, 1, k), "ping-pong there");
      EXPECT_OK(ncclPutSignal(buf, bytes, ncclInt8, 0, w, bytes, 0, 0, 0, comm, stream));
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  window_free(w, buf);
  ncclMemFree(src);
}

/* Signal every rank, wait for every rank, ten times, in one group each. */
void barrier(void) {
  ncclWaitSignalDesc_t* d = calloc((size_t)nranks, sizeof(*d));
  for (int p = 0; p < nranks; p++) d[p] = (ncclWaitSignalDesc_t){1, p, 0, 0};
  for (int k = 0; k < 10; k++) {
    EXPECT_OK(ncclGroupStart());
    for (int p = 0; p < nranks; p++) EXPECT_OK(ncclSignal(p, 0, 0, 0, comm, stream));
    EXPECT_OK(ncclWaitSignal(nranks, d, comm, stream));
    EXPECT_OK(ncclGroupEnd());
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  free(d);
}

/* Each rank puts a block into every rank's window (itself included) at
 * its own offset, in `parts` puts, and waits for that many signals from
 * each: several signals to one peer in one group (under MPS one polling
 * kernel writes them, and the counter must end at the last count). */
void alltoall(size_t block, int parts) {
  void* buf;
  ncclWindow_t w = window(block * (size_t)nranks, &buf);
  char* src = dev_alloc(block * (size_t)nranks);
  for (int p = 0; p < nranks; p++) pattern_fill(src + (size_t)p * block, block, seed_of(rank, p, 3), stream);
  ncclWaitSignalDesc_t* d = calloc((size_t)nranks, sizeof(*d));
  EXPECT_OK(ncclGroupStart());
  size_t chunk = block / (size_t)parts;
  for (int p = 0; p < nranks; p++) {
    for (int c = 0; c < parts; c++) {
      size_t at = (size_t)c * chunk, len = c == parts - 1 ? block - at : chunk;
      EXPECT_OK(ncclPutSignal(src + (size_t)p * block + at, len, ncclInt8, p, w, (size_t)rank * block + at, 0, 0, 0,
                              comm, stream));
    }
    d[p] = (ncclWaitSignalDesc_t){parts, p, 0, 0};
  }
  EXPECT_OK(ncclWaitSignal(nranks, d, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  for (int p = 0; p < nranks; p++)
    expect_pattern((char*)buf + (size_t)p * block, block, seed_of(p, rank, 3), "one-sided all-to-all");
  MPI_Barrier(MPI_COMM_WORLD);
  window_free(w, buf);
  ncclMemFree(src);
  free(d);
}

/* Many large puts to one peer, then one signal: seeing it, the peer sees
 * all of them (the puts signal too; the waiter counts them all). */
void many_then_signal(void) {
  enum { K = 16 };
  size_t block = 4 << 20;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  void* buf;
  ncclWindow_t w = window(block * K, &buf);
  char* src = dev_alloc(block * K);
  for (int k = 0; k < K; k++) pattern_fill(src + k * block, block, seed_of(rank, to, 10 + k), stream);
  for (int k = 0; k < K; k++)
    EXPECT_OK(ncclPutSignal(src + k * block, block, ncclInt8, to, w, k * block, 0, 0, 0, comm, stream));
  EXPECT_OK(ncclSignal(to, 0, 0, 0, comm, stream));
  ncclWaitSignalDesc_t d = {K + 1, from, 0, 0};
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  for (int k = 0; k < K; k++) expect_pattern((char*)buf + k * block, block, seed_of(from, rank, 10 + k), "many puts");
  MPI_Barrier(MPI_COMM_WORLD);
  window_free(w, buf);
  ncclMemFree(src);
}

/* Signals that arrive before their wait is enqueued are kept, and counts
 * add up across waits. */
void early_signals(void) {
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  for (int k = 0; k < 3; k++) EXPECT_OK(ncclSignal(to, 0, 0, 0, comm, stream));
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD); /* every signal has landed */
  ncclWaitSignalDesc_t d = {2, from, 0, 0};
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  d.opCnt = 1;
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

/*
 * Signals to one peer and context from two streams: the first put and
 * signal on a stream held back on the GPU for 0.3 s, the second on another
 * that is not.  A signal stores a running count, so the second must not be
 * seen before the first (the peer's wait for both would pass before the
 * first put, or hang on the first count written last).  Three rounds with
 * each put a launch of its own, then three with both in one group.
 */
void signal_streams(void) {
  enum { BLOCK = 65536, HOLD_MS = 300 };
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  void* buf;
  ncclWindow_t w = window(2 * BLOCK, &buf);
  char* src = dev_alloc(2 * BLOCK);
  cudaStream_t held, other;
  EXPECT(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  for (int round = 0; round < 6; round++) {
    int grouped = round >= 3;
    for (int b = 0; b < 2; b++) pattern_fill(src + b * BLOCK, BLOCK, seed_of(rank, to, 20 + 2 * round + b), stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
    hold_stream(held, HOLD_MS);
    if (grouped) EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclPutSignal(src, BLOCK, ncclInt8, to, w, 0, 0, 0, 0, comm, held));
    EXPECT_OK(ncclPutSignal(src + BLOCK, BLOCK, ncclInt8, to, w, BLOCK, 0, 0, 0, comm, other));
    if (grouped) EXPECT_OK(ncclGroupEnd());
    ncclWaitSignalDesc_t d = {2, from, 0, 0};
    EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
    for (int b = 0; b < 2; b++) {
      char what[64];
      snprintf(what, sizeof(what), "signal_streams round %d%s put %d", round, grouped ? " (one group)" : "", b);
      expect_pattern((char*)buf + b * BLOCK, BLOCK, seed_of(from, rank, 20 + 2 * round + b), what);
    }
    EXPECT(cudaStreamSynchronize(held) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(other) == cudaSuccess);
    EXPECT(cudaMemsetAsync(buf, 0, 2 * BLOCK, stream) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD); /* cleared before the next round's puts */
  }
  EXPECT(cudaStreamDestroy(held) == cudaSuccess);
  EXPECT(cudaStreamDestroy(other) == cudaSuccess);
  window_free(w, buf);
  ncclMemFree(src);
}

/* Each round of the held-stream steps: x and y cleared, every rank ready. */
static void held_round_start(char* x, char* y, size_t bytes) {
  EXPECT(cudaMemsetAsync(x, 0, bytes, stream) == cudaSuccess);
  EXPECT(cudaMemsetAsync(y, 0, bytes, stream) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Each round's end: the test's stream copies x to y, which must hold the
 * fill seeded by seed, once its waits passed; then `held` drains. */
static void held_round_end(char* x, char* y, size_t bytes, uint32_t seed, const char* name, int round,
                           cudaStream_t held) {
  EXPECT(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, stream) == cudaSuccess);
  char what[48];
  snprintf(what, sizeof(what), "%s round %d", name, round);
  expect_pattern(y, bytes, seed, what);
  EXPECT(cudaStreamSynchronize(held) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

/*
 * A barrier's signal to the rank itself, waited for from another stream:
 * the wait must hold until the barrier's stream reaches the signal, which
 * any shortcut for a rank's own signals must keep (docs/RMA.md, "A rank's
 * signals to itself": a barrier that also waits for itself leaves the
 * write out; this one does not wait for itself, so it must write).  Stream
 * `held` is held back, fills x and joins a barrier that signals every
 * rank, itself included, but waits only for the others; the test's stream
 * waits for the signal to itself, then copies x to y, which must hold the
 * fill.
 */
void self_lag(void) {
  enum { BYTES = 65536, HOLD_MS = 200, ROUNDS = 3 };
  char* x = dev_alloc(BYTES);
  char* y = dev_alloc(BYTES);
  cudaStream_t held;
  EXPECT(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) == cudaSuccess);
  ncclWaitSignalDesc_t* others = calloc((size_t)nranks, sizeof(*others));
  int nothers = 0;
  for (int p = 0; p < nranks; p++)
    if (p != rank) others[nothers++] = (ncclWaitSignalDesc_t){1, p, 0, 0};
  for (int round = 0; round < ROUNDS; round++) {
    uint32_t seed = seed_of(rank, rank, 40 + round);
    held_round_start(x, y, BYTES);
    hold_stream(held, HOLD_MS);
    pattern_fill(x, BYTES, seed, held);
    EXPECT_OK(ncclGroupStart());
    for (int p = 0; p < nranks; p++) EXPECT_OK(ncclSignal(p, 0, 0, 0, comm, held));
    if (nothers) EXPECT_OK(ncclWaitSignal(nothers, others, comm, held));
    EXPECT_OK(ncclGroupEnd());
    ncclWaitSignalDesc_t me = {1, rank, 0, 0};
    EXPECT_OK(ncclWaitSignal(1, &me, comm, stream));
    held_round_end(x, y, BYTES, seed, "self_lag", round, held);
  }
  EXPECT(cudaStreamDestroy(held) == cudaSuccess);
  free(others);
  EXPECT_OK(ncclMemFree(x));
  EXPECT_OK(ncclMemFree(y));
}

/* The barrier of self_lag, waiting for every rank itself included, on a
 * stream held back after a fill of x, so that its write to itself may be
 * left out: self_signals signals to the rank itself, a wait for self_waits
 * of them.  Returns the fill's seed; the caller synchronizes `held`. */
static uint32_t held_barrier(cudaStream_t held, char* x, size_t bytes, int round, int self_signals, int self_waits) {
  uint32_t seed = seed_of(rank, rank, 50 + round);
  hold_stream(held, 200);
  pattern_fill(x, bytes, seed, held);
  ncclWaitSignalDesc_t* all = calloc((size_t)nranks, sizeof(*all));
  for (int p = 0; p < nranks; p++) all[p] = (ncclWaitSignalDesc_t){p == rank ? self_waits : 1, p, 0, 0};
  EXPECT_OK(ncclGroupStart());
  for (int p = 0; p < nranks; p++)
    for (int k = 0; k < (p == rank ? self_signals : 1); k++) EXPECT_OK(ncclSignal(p, 0, 0, 0, comm, held));
  EXPECT_OK(ncclWaitSignal(nranks, all, comm, held));
  EXPECT_OK(ncclGroupEnd());
  free(all);
  return seed;
}

/*
 * A barrier that waits for every rank, itself included, on a stream held
 * back, then a signal of the rank to itself on a second stream: a wait for
 * that second count on a third stream implies the barrier's signal too, so
 * the fill before the barrier must be there.  Where the barrier's write to
 * the rank itself is left out, the second signal waits for the counter
 * that stood in for it (never written if it waited for the left-out count:
 * a hang; if it waited for nothing, the copy would come before the fill).
 */
void self_order(void) {
  enum { BYTES = 65536, ROUNDS = 3 };
  char *x = dev_alloc(BYTES), *y = dev_alloc(BYTES);
  cudaStream_t held, other;
  EXPECT(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  for (int round = 0; round < ROUNDS; round++) {
    held_round_start(x, y, BYTES);
    uint32_t seed = held_barrier(held, x, BYTES, round, 1, 1);
    EXPECT_OK(ncclSignal(rank, 0, 0, 0, comm, other));
    ncclWaitSignalDesc_t me = {1, rank, 0, 0};
    EXPECT_OK(ncclWaitSignal(1, &me, comm, stream));
    EXPECT(cudaStreamSynchronize(other) == cudaSuccess);
    held_round_end(x, y, BYTES, seed, "self_order", round, held);
  }
  EXPECT(cudaStreamDestroy(held) == cudaSuccess);
  EXPECT(cudaStreamDestroy(other) == cudaSuccess);
  EXPECT_OK(ncclMemFree(x));
  EXPECT_OK(ncclMemFree(y));
}

/*
 * A wait for the rank's own signal enqueued on the test's stream before a
 * barrier, held back, that signals the rank itself twice and waits for it
 * once: the first count answers the early wait, so the barrier must write
 * it, although with the early wait every count it signals is consumed.
 */
void self_early_wait(void) {
  enum { BYTES = 65536, ROUNDS = 3 };
  char *x = dev_alloc(BYTES), *y = dev_alloc(BYTES);
  cudaStream_t held;
  EXPECT(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) == cudaSuccess);
  for (int round = 0; round < ROUNDS; round++) {
    held_round_start(x, y, BYTES);
    ncclWaitSignalDesc_t me = {1, rank, 0, 0};
    EXPECT_OK(ncclWaitSignal(1, &me, comm, stream));
    uint32_t seed = held_barrier(held, x, BYTES, round, 2, 1);
    held_round_end(x, y, BYTES, seed, "self_early_wait", round, held);
  }
  EXPECT(cudaStreamDestroy(held) == cudaSuccess);
  EXPECT_OK(ncclMemFree(x));
  EXPECT_OK(ncclMemFree(y));
}

/*
 * A signal of the rank to itself on a stream held back after a fill of x,
 * then a barrier on a second stream that signals the others and then
 * itself, and waits for every rank (for itself twice: the held signal and
 * its own), then a signal to itself on a third stream, and a wait on the
 * test's stream for that third count. The barrier's signal to itself must
 * wait for the held count, and the third signal for the barrier's: so the
 * test's copy comes after the fill. A barrier that left its write to itself
 * out with a stand-in written before that wait let the third signal pass
 * early (wrong data) and then store its count under the held one's (a hang
 * in the next round): found by a desk review in the twenty-fourth session.
 */
void self_after_other(void) {
  enum { BYTES = 65536, ROUNDS = 3 };
  char *x = dev_alloc(BYTES), *y = dev_alloc(BYTES);
  cudaStream_t held, barrier, third;
  EXPECT(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&barrier, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&third, cudaStreamNonBlocking) == cudaSuccess);
  ncclWaitSignalDesc_t* all = calloc((size_t)nranks, sizeof(*all));
  for (int p = 0; p < nranks; p++) all[p] = (ncclWaitSignalDesc_t){p == rank ? 2 : 1, p, 0, 0};
  for (int round = 0; round < ROUNDS; round++) {
    uint32_t seed = seed_of(rank, rank, 60 + round);
    held_round_start(x, y, BYTES);
    hold_stream(held, 200);
    pattern_fill(x, BYTES, seed, held);
    EXPECT_OK(ncclSignal(rank, 0, 0, 0, comm, held));
    EXPECT_OK(ncclGroupStart());
    for (int p = 0; p < nranks; p++)
      if (p != rank) EXPECT_OK(ncclSignal(p, 0, 0, 0, comm, barrier));
    EXPECT_OK(ncclSignal(rank, 0, 0, 0, comm, barrier));
    EXPECT_OK(ncclWaitSignal(nranks, all, comm, barrier));
    EXPECT_OK(ncclGroupEnd());
    EXPECT_OK(ncclSignal(rank, 0, 0, 0, comm, third));
    ncclWaitSignalDesc_t me = {1, rank, 0, 0};
    EXPECT_OK(ncclWaitSignal(1, &me, comm, stream));
    held_round_end(x, y, BYTES, seed, "self_after_other", round, held);
    EXPECT(cudaStreamSynchronize(barrier) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(third) == cudaSuccess);
  }
  free(all);
  EXPECT(cudaStreamDestroy(held) == cudaSuccess);
  EXPECT(cudaStreamDestroy(barrier) == cudaSuccess);
  EXPECT(cudaStreamDestroy(third) == cudaSuccess);
  EXPECT_OK(ncclMemFree(x));
  EXPECT_OK(ncclMemFree(y));
}

/* A ring of sends and a ring of puts in one group. */
void mixed_group(void) {
  size_t bytes = 100000;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  void* buf;
  ncclWindow_t w = window(bytes, &buf);
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes), *p = dev_alloc(bytes);
  pattern_fill(s, bytes, seed_of(rank, to, 20), stream);
  pattern_fill(p, bytes, seed_of(rank, to, 21), stream);
  ncclWaitSignalDesc_t d = {1, from, 0, 0};
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, to, comm, stream));
  EXPECT_OK(ncclPutSignal(p, bytes, ncclInt8, to, w, 0, 0, 0, 0, comm, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, from, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  expect_pattern(r, bytes, seed_of(from, rank, 20), "mixed group: send/recv");
  expect_pattern(buf, bytes, seed_of(from, rank, 21), "mixed group: put");
  MPI_Barrier(MPI_COMM_WORLD);
  window_free(w, buf);
  ncclMemFree(s), ncclMemFree(r), ncclMemFree(p);
}
