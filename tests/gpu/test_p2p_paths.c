/*
 * test_p2p_paths.c - test_p2p's steps for the paths a message may take
 * between ranks of one host: the inbox (small and big slots, on a
 * time-sliced GPU too), delegation, messages 512 ahead and 512 apart on two
 * streams, the group limit, pushes between GPUs and the flag kernel's copy
 * grid.  Every received byte is checked against its sender's pattern.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/topo.h"
#include "harness.h"
#include "mpinccl.h"
#include "p2p/p2p.h"
#include "pattern.h"
#include "test_p2p.h"
#include "transport.h"

/* Whether another process shares this rank's GPU without MPS (time-sliced),
 * with the time-sliced inbox's parameter at its default. */
static int sliced_between(int peer) {
  return comm->transport[peer] == MPN_TRANSPORT_IPC && mpn_topo_same_gpu(&comm->topo, rank, peer) &&
         comm->topo.gpu_sliced[rank] && getenv("MPINCCL_SLICED_INBOX_WAIT_US") == NULL;
}

/* Whether messages between this rank and peer may take the pair's inbox,
 * with the inbox's parameters at their defaults: another process whose
 * kernels run beside ours (on this GPU under MPS, or on another GPU), or,
 * in launches with several processes of a time-sliced GPU (several_peers),
 * any other process on it.  big: its big ring, which is for processes of
 * one GPU only. */
int inbox_between(int peer, int several_peers, int big) {
  const char* flags = getenv("MPINCCL_FLAGS"); /* the inbox lives with the flags in device memory */
  return comm->transport[peer] == MPN_TRANSPORT_IPC && (flags == NULL || strcmp(flags, "host") != 0) &&
         (!big || mpn_topo_same_gpu(&comm->topo, rank, peer)) &&
         (mpn_topo_kernels_concurrent(&comm->topo, rank, peer) || (several_peers && sliced_between(peer))) &&
         getenv("MPINCCL_EAGER_MAX") == NULL && getenv("MPINCCL_EAGER_BIG_MAX") == NULL;
}

/* Sums of every rank's inbox counters (mpn_p2p_stats): small ring, big
 * ring, no free slot, host waits that got their slot (each may be NULL). */
static void inbox_counts(uint64_t* small, uint64_t* big, uint64_t* no_slot, uint64_t* waits) {
  uint64_t eager[2], mine[4], all[4];
  mpn_p2p_stats(comm, eager, &mine[2], &mine[3]);
  mine[0] = eager[0];
  mine[1] = eager[1];
  MPI_Allreduce(mine, all, 4, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  uint64_t* out[4] = {small, big, no_slot, waits};
  for (int k = 0; k < 4; k++)
    if (out[k]) *out[k] = all[k];
}

/*
 * Many messages of mixed sizes to one peer in one group: more than a pair's
 * inbox has slots (128), sizes on both sides of MPINCCL_EAGER_MAX, at odd
 * offsets.  Where the inbox applies (MPS, processes on different GPUs,
 * several processes of a time-sliced GPU) the small ones take it while it
 * has free slots, and the others the two-hop path; every byte arrives, in order.  Three
 * groups: about 740 eager messages go through the 128 slots, so later
 * groups reuse slots earlier ones freed.
 */
void many_small(void) {
  enum { N = 300 };
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  int applies = nranks > 1 && inbox_between(to, to != from, 0) && inbox_between(from, to != from, 0), all_apply = 0;
  MPI_Allreduce(&applies, &all_apply, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  uint64_t small0, small1;
  inbox_counts(&small0, NULL, NULL, NULL);
  size_t off[N + 1];
  off[0] = 0;
  for (int k = 0; k < N; k++) off[k + 1] = off[k] + 1 + (size_t)(k * 131) % 5000;
  char *s = dev_alloc(off[N]), *r = dev_alloc(off[N]);
  for (int round = 0; round < 3; round++) {
    for (int k = 0; k < N; k++)
      pattern_fill(s + off[k], off[k + 1] - off[k], seed_of(rank, to, 1000 + round * N + k), stream);
    EXPECT_OK(ncclGroupStart());
    for (int k = 0; k < N; k++) EXPECT_OK(ncclSend(s + off[k], off[k + 1] - off[k], ncclInt8, to, comm, stream));
    for (int k = 0; k < N; k++) EXPECT_OK(ncclRecv(r + off[k], off[k + 1] - off[k], ncclInt8, from, comm, stream));
    EXPECT_OK(ncclGroupEnd());
    for (int k = 0; k < N; k++) {
      char what[64];
      snprintf(what, sizeof(what), "many_small round %d message %d", round, k);
      expect_pattern(r + off[k], off[k + 1] - off[k], seed_of(from, rank, 1000 + round * N + k), what);
    }
  }
  inbox_counts(&small1, NULL, NULL, NULL);
  if (all_apply) EXPECT(small1 > small0);
  cudaFree(s);
  cudaFree(r);
}

/*
 * Messages between MPINCCL_EAGER_MAX and 376 KiB take the inbox's 4 big
 * slots under MPS (and without it, from 3 ranks on, where each group has
 * two peers on the time-sliced GPU).  One group of 6 each way: the 5th and 6th find their
 * slots held by the 1st and 2nd, which cannot be copied out before the
 * group runs, and take the two-hop path.  Then, one group at a time (each
 * waited for), rounds reuse the slots.  Every byte is checked; where the
 * inbox applies, the counters must show both paths.
 */
void big_inbox(void) {
  enum { GROUP = 6, ROUNDS = 6 };
  static const size_t sizes[GROUP + ROUNDS] = {4097,   150000, 196608, 100003, 150000, 8192,
                                               150000, 196608, 4097,   150000, 150000, 150000};
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  int applies = nranks > 1 && inbox_between(to, to != from, 1) && inbox_between(from, to != from, 1), all_apply = 0;
  MPI_Allreduce(&applies, &all_apply, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  char *s[GROUP + ROUNDS], *r[GROUP + ROUNDS];
  for (int k = 0; k < GROUP + ROUNDS; k++) {
    s[k] = dev_alloc(sizes[k]);
    r[k] = dev_alloc(sizes[k]);
    pattern_fill(s[k], sizes[k], seed_of(rank, to, 9000 + k), stream);
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  uint64_t big0, none0, big1, none1, big2, none2;
  inbox_counts(NULL, &big0, &none0, NULL);
  EXPECT_OK(ncclGroupStart());
  for (int k = 0; k < GROUP; k++) EXPECT_OK(ncclSend(s[k], sizes[k], ncclInt8, to, comm, stream));
  for (int k = 0; k < GROUP; k++) EXPECT_OK(ncclRecv(r[k], sizes[k], ncclInt8, from, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  inbox_counts(NULL, &big1, &none1, NULL);
  for (int k = GROUP; k < GROUP + ROUNDS; k++) {
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(ncclSend(s[k], sizes[k], ncclInt8, to, comm, stream));
    EXPECT_OK(ncclRecv(r[k], sizes[k], ncclInt8, from, comm, stream));
    EXPECT_OK(ncclGroupEnd());
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD); /* both sides' copies out: the slots are free */
  }
  inbox_counts(NULL, &big2, &none2, NULL);
  if (all_apply) { /* each message is counted by its two sides; nranks directed pairs */
    uint64_t sides = 2 * (uint64_t)nranks;
    EXPECT(big1 - big0 == sides * 4 && none1 - none0 >= (uint64_t)nranks * 2);
    EXPECT(big2 - big1 == sides * ROUNDS && none2 == none1);
  }
  for (int k = 0; k < GROUP + ROUNDS; k++) {
    char what[64];
    snprintf(what, sizeof(what), "big_inbox message %d (%zu B)", k, sizes[k]);
    expect_pattern(r[k], sizes[k], seed_of(from, rank, 9000 + k), what);
    cudaFree(s[k]);
    cudaFree(r[k]);
  }
}

/*
 * Without MPS a launch with several processes of the GPU takes the inbox
 * too, its host waiting (MPINCCL_SLICED_INBOX_WAIT_US) for slots that the
 * receiver's GPU has not freed yet.  A ring of 150000-byte messages (two
 * peers per launch from 3 ranks on), 12 launches back to back, each behind
 * 200 us of GPU work, so the hosts run ahead of the GPU and wait: more
 * messages than the 4 slots hold take the big ring, after waits that got
 * their slot.  Then rank 0's host sleeps 100 ms before its launches: the
 * rank that sends to it waits for a slot rank 0 cannot free yet, gives up
 * (20 ms) and sends by the two-hop path.  Every byte is checked; where
 * this applies the counters must show all of that.
 */
void sliced_inbox(void) {
  enum { LAUNCHES = 12, BYTES = 150000 };
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  int applies = nranks > 2 && sliced_between(to) && sliced_between(from) && inbox_between(to, 1, 1), all_apply = 0;
  MPI_Allreduce(&applies, &all_apply, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  char *s = dev_alloc((size_t)LAUNCHES * BYTES), *r = dev_alloc((size_t)LAUNCHES * BYTES);
  for (int phase = 0; phase < 2; phase++) {
    for (int k = 0; k < LAUNCHES; k++)
      pattern_fill(s + (size_t)k * BYTES, BYTES, seed_of(rank, to, 11000 + phase * LAUNCHES + k), stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
    uint64_t big0, none0, waits0, big1, none1, waits1;
    inbox_counts(NULL, &big0, &none0, &waits0);
    if (phase == 1 && rank == 0) usleep(100000);
    for (int k = 0; k < LAUNCHES; k++) {
      gpu_busy(200, stream);
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(s + (size_t)k * BYTES, BYTES, ncclInt8, to, comm, stream));
      EXPECT_OK(ncclRecv(r + (size_t)k * BYTES, BYTES, ncclInt8, from, comm, stream));
      EXPECT_OK(ncclGroupEnd());
    }
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    MPI_Barrier(MPI_COMM_WORLD);
    inbox_counts(NULL, &big1, &none1, &waits1);
    if (all_apply && phase == 0) /* both sides count each message; the slots were free for the first 4 */
      EXPECT(big1 - big0 > 2 * (uint64_t)nranks * 4 && waits1 > waits0);
    if (all_apply && phase == 1) EXPECT(none1 > none0);
    for (int k = 0; k < LAUNCHES; k++) {
      char what[64];
      snprintf(what, sizeof(what), "sliced_inbox phase %d launch %d", phase, k);
      expect_pattern(r + (size_t)k * BYTES, BYTES, seed_of(from, rank, 11000 + phase * LAUNCHES + k), what);
    }
  }
  cudaFree(s);
  cudaFree(r);
}

/* This rank's messages through the inbox's big ring so far (both of its
 * sides), and those whose first side (this rank) found no free inbox slot,
 * also after its host's bounded wait for one: they take two hops.
 * (inbox_counts: the same summed over the ranks.) */
static void rank_inbox_counts(uint64_t* big, uint64_t* no_slot) {
  uint64_t eager[2];
  mpn_p2p_stats(comm, eager, no_slot, NULL);
  *big = eager[1];
}

/* One launch of a sendrecv of bytes with peer. */
static void pair_launch(char* s, char* r, size_t bytes, int peer) {
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, peer, comm, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, peer, comm, stream));
  EXPECT_OK(ncclGroupEnd());
}

/*
 * Two processes of a time-sliced GPU that exchange with each other alone
 * (partners rank ^ 1; an odd last rank sits out): while a rank runs GPU
 * work of its own between launches, its launches take the inbox's big ring
 * (one hop, p2p/gap.h); with nothing between them, delegation.  The gap
 * is timed once in some 34 launches (258 while delegating), and two samples
 * change the choice.  Launches of 150000 B each way, in rounds waited for:
 * 32 rounds of 20 launches, each behind 100 us of GPU work; then 3 rounds
 * of 120 launches back to back behind 5 ms of work (a sample that spans two
 * rounds sees that work; one alone changes nothing); then the first kind
 * again.  Every byte is checked; where this applies, the
 * last round of each phase must have taken the path expected: in a busy
 * phase every message the inbox, in a quiet one none, unless a first side
 * found no slot free within its host's wait (a loaded GPU: make -j4 check),
 * which makes the busy round's paths a matter of timing (then reported,
 * not checked).
 */
void sliced_pair(void) {
  enum { BUSY_ROUNDS = 32, BUSY_BURST = 20, QUIET_ROUNDS = 3, BURST = 120, BYTES = 150000 };
  int peer = rank ^ 1, in = peer < nranks;
  int applies = !in || (sliced_between(peer) && inbox_between(peer, 1, 1) && getenv("MPINCCL_SLICED_GAP_US") == NULL),
      all_apply = 0;
  MPI_Allreduce(&applies, &all_apply, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  char *s = dev_alloc((size_t)BURST * BYTES), *r = dev_alloc((size_t)BURST * BYTES);
  int k0 = 12000;
  for (int phase = 0; phase < 3; phase++) {
    int busy = phase != 1, rounds = busy ? BUSY_ROUNDS : QUIET_ROUNDS, n = busy ? BUSY_BURST : BURST;
    uint64_t before = 0, no_slot_before = 0;
    for (int round = 0; round < rounds; round++, k0 += n) {
      if (round == rounds - 1) rank_inbox_counts(&before, &no_slot_before);
      for (int k = 0; in && k < n; k++) pattern_fill(s + (size_t)k * BYTES, BYTES, seed_of(rank, peer, k0 + k), stream);
      if (in && !busy) gpu_busy(5000, stream); /* then nothing of the round's own between its launches */
      for (int k = 0; in && k < n; k++) {
        if (busy) gpu_busy(100, stream);
        pair_launch(s + (size_t)k * BYTES, r + (size_t)k * BYTES, BYTES, peer);
      }
      EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
      MPI_Barrier(MPI_COMM_WORLD);
      for (int k = 0; in && k < n; k++) {
        char what[96]; /* (room for three ints of any size) */
        snprintf(what, sizeof(what), "sliced_pair phase %d round %d launch %d", phase, round, k);
        expect_pattern(r + (size_t)k * BYTES, BYTES, seed_of(peer, rank, k0 + k), what);
      }
    }
    uint64_t got, no_slot, want = busy ? 2 * (uint64_t)n : 0, pair_no_slot = 0;
    rank_inbox_counts(&got, &no_slot);
    got -= before;
    no_slot -= no_slot_before;
    if (in)
      MPI_Sendrecv(&no_slot, 1, MPI_UINT64_T, peer, 31, &pair_no_slot, 1, MPI_UINT64_T, peer, 31, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    pair_no_slot += no_slot;
    /* Where a first side's host waited in vain for a slot (the receiver's
     * GPU had not freed it in time: a loaded GPU, as under make -j4 check
     * with 8 processes), the round's paths depend on timing: such messages
     * go two-hop by design, and both sides may count one.  Then the paths
     * are only reported; the data was checked above either way. */
    int timed = busy && pair_no_slot > 0;
    if (in && all_apply && (got != want || timed)) /* this rank's send and receive of each launch */
      fprintf(stderr,
              "[rank %d] sliced_pair phase %d: %llu big-ring messages in its last round, %s %llu "
              "(%llu of the pair's found no free slot)\n",
              rank, phase, (unsigned long long)got, timed ? "expected without slot waits:" : "not",
              (unsigned long long)want, (unsigned long long)pair_no_slot);
    if (in && all_apply && !timed) EXPECT(got == want);
  }
  cudaFree(s);
  cudaFree(r);
}

/* More than 512 messages to one peer in one group are refused before
 * anything is posted (messages 512 apart share a slot's flags, p2p.c), and
 * the communicator goes on working; 512 pass. */
void group_limit(void) {
  enum { N = 513, BYTES = 16 };
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s = dev_alloc((size_t)N * BYTES), *r = dev_alloc((size_t)N * BYTES);
  for (int n = N; n >= N - 1; n--) {
    for (int k = 0; k < n; k++) pattern_fill(s + (size_t)k * BYTES, BYTES, seed_of(rank, to, 7000 + k), stream);
    EXPECT_OK(ncclGroupStart());
    for (int k = 0; k < n; k++) EXPECT_OK(ncclSend(s + (size_t)k * BYTES, BYTES, ncclInt8, to, comm, stream));
    for (int k = 0; k < n; k++) EXPECT_OK(ncclRecv(r + (size_t)k * BYTES, BYTES, ncclInt8, from, comm, stream));
    if (n == N) {
      EXPECT_ERR(ncclGroupEnd(), ncclInvalidUsage, "at most 512 per peer and direction");
      continue;
    }
    EXPECT_OK(ncclGroupEnd());
    for (int k = 0; k < n; k++) {
      char what[64];
      snprintf(what, sizeof(what), "group_limit message %d", k);
      expect_pattern(r + (size_t)k * BYTES, BYTES, seed_of(from, rank, 7000 + k), what);
    }
  }
  cudaFree(s);
  cudaFree(r);
}

/*
 * A sender whose host runs more than 512 messages ahead of its receiver:
 * even ranks post N single sends to the next rank while it sleeps, then
 * receives them one by one.  The sender waits for the receiver to catch up
 * (MPINCCL_AHEAD_TIMEOUT) instead of refusing message 513.
 */
void host_ahead(void) {
  enum { N = 1300, BYTES = 8 };
  if (nranks < 2 || harness_over_ucx()) return;
  int sender = rank % 2 == 0, peer = sender ? rank + 1 : rank - 1;
  if (peer >= nranks) return; /* the last of an odd number sits out */
  char* buf = dev_alloc((size_t)N * BYTES);
  if (sender)
    for (int k = 0; k < N; k++) pattern_fill(buf + (size_t)k * BYTES, BYTES, seed_of(rank, peer, 5000 + k), stream);
  else
    usleep(300 * 1000);
  for (int k = 0; k < N; k++) {
    char* at = buf + (size_t)k * BYTES;
    EXPECT_OK(sender ? ncclSend(at, BYTES, ncclInt8, peer, comm, stream)
                     : ncclRecv(at, BYTES, ncclInt8, peer, comm, stream));
  }
  if (!sender)
    for (int k = 0; k < N; k++) {
      char what[64];
      snprintf(what, sizeof(what), "host_ahead message %d", k);
      expect_pattern(buf + (size_t)k * BYTES, BYTES, seed_of(peer, rank, 5000 + k), what);
    }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaFree(buf);
}

/*
 * Messages k and k + 512 of a pair share a slot and its flag words
 * (docs/P2P.md, known problem 5).  Each rank of a pair (rank ^ 1; alone,
 * itself) posts three groups of sends and receives of WRAP_BYTES each:
 * messages 0-511 on a stream held back on the GPU for a while, 512-1023 on
 * another that is not, and 76 more on the first.  Each group is preceded,
 * on its stream, by the fill of its send buffers and the clearing of its
 * receive buffers, so a message that moved before its stream got there (a
 * wait passed by the later message's flag) shows as wrong data.  One rank
 * of the pair is held 0.3 s longer than the other, each in turn: the one
 * that resumes first then runs ahead of the other's fills.
 */
enum { WRAP_BYTES = 4000, WRAP_HOLD_MS = 100 };

static void wrap_group(ncclComm_t c, char* s, char* r, int n, int peer, uint32_t seed, cudaStream_t on) {
  pattern_fill(s, (size_t)n * WRAP_BYTES, seed, on);
  EXPECT(cudaMemsetAsync(r, 0, (size_t)n * WRAP_BYTES, on) == cudaSuccess);
  EXPECT_OK(ncclGroupStart());
  for (int k = 0; k < n; k++) {
    EXPECT_OK(ncclSend(s + (size_t)k * WRAP_BYTES, WRAP_BYTES, ncclInt8, peer, c, on));
    EXPECT_OK(ncclRecv(r + (size_t)k * WRAP_BYTES, WRAP_BYTES, ncclInt8, peer, c, on));
  }
  EXPECT_OK(ncclGroupEnd());
}

void streams_wrap(void) {
  static const int count[3] = {512, 512, 76};
  if (harness_over_ucx()) return;
  int peer = (rank ^ 1) < nranks ? rank ^ 1 : rank;
  ncclComm_t c; /* its own: the slot table left behind would cost later steps the flag kernel */
  EXPECT_OK(ncclCommSplit(comm, 0, rank, &c, NULL));
  cudaStream_t other;
  EXPECT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
  size_t bytes = (size_t)(512 + 512 + 76) * WRAP_BYTES;
  char *s = dev_alloc(bytes), *r = dev_alloc(bytes);
  for (int round = 0; round < 2; round++) {
    MPI_Barrier(MPI_COMM_WORLD);
    hold_stream(stream, (rank & 1) == round ? WRAP_HOLD_MS : 4 * WRAP_HOLD_MS);
    for (int g = 0, at = 0; g < 3; at += count[g++])
      wrap_group(c, s + (size_t)at * WRAP_BYTES, r + (size_t)at * WRAP_BYTES, count[g], peer,
                 seed_of(rank, peer, 13000 + 3 * round + g), g == 1 ? other : stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    EXPECT(cudaStreamSynchronize(other) == cudaSuccess);
    for (int g = 0, at = 0; g < 3; at += count[g++]) {
      char what[64];
      snprintf(what, sizeof(what), "streams_wrap round %d group %d", round, g);
      expect_pattern(r + (size_t)at * WRAP_BYTES, (size_t)count[g] * WRAP_BYTES,
                     seed_of(peer, rank, 13000 + 3 * round + g), what);
    }
  }
  cudaFree(s);
  cudaFree(r);
  EXPECT(cudaStreamDestroy(other) == cudaSuccess);
  EXPECT_OK(ncclCommDestroy(c));
}

/*
 * Between processes on different GPUs each side moves its own large sends
 * (p2p/push.h; partners rank ^ 1, an odd last rank sits out).  Phase 0:
 * 16 rounds of an 8 MiB sendrecv, each after a barrier, so the hosts post
 * within microseconds of each other: where this applies each rank must
 * have pushed its send in at least 4 of them (a host delayed past
 * MPINCCL_PUSH_WAIT_US leaves that round to the peer).  Phase 1: the
 * higher rank's host sleeps 5 ms before each of 3 rounds, so the lower
 * rank's waits run out and the higher moves both directions.  Phase 2: a
 * one-way 8 MiB message, which nobody waits for.  Every byte is checked.
 */
void push_own(void) {
  enum { ROUNDS = 16, LATE = 3, BYTES = 8 << 20 };
  int peer = rank ^ 1, in = peer < nranks;
  int applies = !in || (comm->transport[peer] == MPN_TRANSPORT_IPC && !mpn_topo_same_gpu(&comm->topo, rank, peer) &&
                        getenv("MPINCCL_PUSH_MIN") == NULL && getenv("MPINCCL_PUSH_WAIT_US") == NULL);
  int all_apply = 0;
  MPI_Allreduce(&applies, &all_apply, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  char *s = dev_alloc(BYTES), *r = dev_alloc(BYTES);
  uint64_t pushed[4], timeouts[4];
  mpn_p2p_push_stats(comm, &pushed[0], &timeouts[0]);
  for (int k = 0; k < ROUNDS + LATE + 1; k++) {
    int phase = k < ROUNDS ? 0 : k < ROUNDS + LATE ? 1 : 2, key = 14000 + k;
    if (in) pattern_fill(s, BYTES, seed_of(rank, peer, key), stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    if (k == ROUNDS || k == ROUNDS + LATE) mpn_p2p_push_stats(comm, &pushed[phase], &timeouts[phase]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (phase == 1 && rank > peer) usleep(5000);
    if (in && phase < 2) pair_launch(s, r, BYTES, peer);
    if (in && phase == 2 && rank < peer) EXPECT_OK(ncclSend(s, BYTES, ncclInt8, peer, comm, stream));
    if (in && phase == 2 && rank > peer) EXPECT_OK(ncclRecv(r, BYTES, ncclInt8, peer, comm, stream));
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    if (in && (phase < 2 || rank > peer)) {
      char what[64];
      snprintf(what, sizeof(what), "push_own round %d", k);
      expect_pattern(r, BYTES, seed_of(peer, rank, key), what);
    }
  }
  mpn_p2p_push_stats(comm, &pushed[3], &timeouts[3]);
  if (all_apply && in)
    printf("push_own rank %d: pushed %llu of %d rounds (%llu waits ran out), then %llu waits ran out of %d\n", rank,
           (unsigned long long)(pushed[1] - pushed[0]), ROUNDS, (unsigned long long)(timeouts[1] - timeouts[0]),
           (unsigned long long)(timeouts[2] - timeouts[1]), LATE);
  if (all_apply && in) {
    EXPECT(pushed[1] - pushed[0] >= ROUNDS / 4 && pushed[1] - pushed[0] + timeouts[1] - timeouts[0] <= ROUNDS);
    if (rank < peer) EXPECT(timeouts[2] - timeouts[1] >= 1); /* (this host too may be late once) */
    EXPECT(pushed[3] == pushed[2] && timeouts[3] == timeouts[2]);
  }
  if (all_apply == 0 || !in) EXPECT(pushed[3] == pushed[0] && timeouts[3] == timeouts[0]);
  cudaFree(s);
  cudaFree(r);
}

/* Launches back to back, never waited for in between, each with two odd
 * sizes above one block's share of a flag kernel's copies (sync.h,
 * MPN_SYNC_BLOCK_BYTES: under MPS the copies are shared by several blocks),
 * more of them than a device's pool has counters, every one into its own
 * buffer and checked. */
void grid_copies(void) {
  enum { ROUNDS = 300 };
  static const size_t sizes[2] = {40001, 200003}; /* the inbox's big slot and above */
  const size_t per_round = sizes[0] + sizes[1];
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s = dev_alloc(ROUNDS * per_round), *r = dev_alloc(ROUNDS * per_round);
  for (int k = 0; k < ROUNDS; k++)
    for (int m = 0; m < 2; m++)
      pattern_fill(s + k * per_round + m * sizes[0], sizes[m], seed_of(rank, to, 11000 + 2 * k + m), stream);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  for (int k = 0; k < ROUNDS; k++) {
    EXPECT_OK(ncclGroupStart());
    for (int m = 0; m < 2; m++) {
      size_t at = k * per_round + m * sizes[0];
      EXPECT_OK(ncclSend(s + at, sizes[m], ncclInt8, to, comm, stream));
      EXPECT_OK(ncclRecv(r + at, sizes[m], ncclInt8, from, comm, stream));
    }
    EXPECT_OK(ncclGroupEnd());
  }
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  for (int k = 0; k < ROUNDS; k++)
    for (int m = 0; m < 2; m++) {
      char what[64];
      snprintf(what, sizeof(what), "grid_copies round %d message %d", k, m);
      expect_pattern(r + k * per_round + m * sizes[0], sizes[m], seed_of(from, rank, 11000 + 2 * k + m), what);
    }
  cudaFree(s);
  cudaFree(r);
}
