/*
 * test_p2p_comms.c - test_p2p's steps with more than one communicator: two
 * at once, ranks of one process (ncclCommInitAll with one thread, on every
 * GPU, and a thread per rank), senders whose communicator goes before the
 * receiver posts, and a rank's pair with itself freed with its
 * communicator.  Every received byte is checked against its sender's
 * pattern.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/param.h"
#include "cuda/event.h"
#include "harness.h"
#include "mpinccl.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "pattern.h"
#include "transport.h"
#include "test_p2p.h"

/* Two communicators, two streams, opposite directions, in flight together. */
void two_comms(void) {
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
void init_all_ring(void) {
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
void init_all_devices(void) {
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
void sender_gone_first(void) {
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
void self_pairs_freed(void) {
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
void sender_gone_loop(void) {
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

void threads_ring(void) {
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

/* Two ranks of this process, a thread each; rank 1 posts every round late,
 * and rank 0 gives up waiting for rank 1's "done" events at once
 * (MPINCCL_LOCAL_WAIT_US=0; they are used under MPS).  Rank 1's events,
 * published after that, must go back to the pool: none is handed out once
 * both are destroyed (the finalize marks of their streams, pooled events
 * too, go back with them). */
typedef struct {
  ncclComm_t comm;
  int me, dev, bad;
  pthread_barrier_t* sync;
} late_arg_t;

static void* late_side(void* p) {
  late_arg_t* a = p;
  enum { ROUNDS = 10 };
  size_t bytes = 1 << 20; /* above every inbox: the data moves by the two-hop handshake */
  cudaSetDevice(a->dev);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  char *s, *r;
  cudaMalloc((void**)&s, bytes);
  cudaMalloc((void**)&r, bytes);
  pattern_check(r, 0, 0, st); /* allocates this thread's counter */
  int peer = 1 - a->me;
  for (int k = 0; k < ROUNDS; k++) {
    pattern_fill(s, bytes, seed_of(a->me, peer, 950 + k), st);
    cudaStreamSynchronize(st);
    pthread_barrier_wait(a->sync);
    if (a->me == 1) usleep(5000); /* rank 0 posts first and stops waiting at once */
    ncclGroupStart();
    ncclSend(s, bytes, ncclInt8, peer, a->comm, st);
    ncclRecv(r, bytes, ncclInt8, peer, a->comm, st);
    a->bad += ncclGroupEnd() != ncclSuccess;
    a->bad += pattern_check(r, bytes, seed_of(peer, a->me, 950 + k), st) != 0;
    cudaStreamSynchronize(st);
    pthread_barrier_wait(a->sync); /* neither frees or refills s while the other reads it */
  }
  cudaFree(s);
  cudaFree(r);
  cudaStreamDestroy(st);
  return NULL;
}

/* The step's end: its communicators go, MPINCCL_LOCAL_WAIT_US as it was. */
static void late_end(ncclComm_t comms[2]) {
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommDestroy(comms[i]));
  unsetenv("MPINCCL_LOCAL_WAIT_US");
  EXPECT_OK(mpn_params_reload());
}

void threads_late_second_side(void) {
  int dev;
  cudaGetDevice(&dev);
  setenv("MPINCCL_LOCAL_WAIT_US", "0", 1);
  EXPECT_OK(mpn_params_reload());
  cudaDeviceSynchronize();
  int out_before = mpn_event_out(dev);
  ncclComm_t comms[2];
  harness_init_all_here(comms, 2);
  int by_events = mpn_transport_by_events(comms[0], 1);
  /* Under MPS every give-up falls back to a stream memory wait, which may
   * hold the hardware queue the late rank's work then queues behind (P2P.md,
   * known problems 2 and 21): run alone in a fresh process the step hung
   * (bench/results/2026-12-02-h200-s52, calls 3 and 4).  Only on request. */
  if (by_events && getenv("TEST_P2P_LATE_MPS") == NULL) {
    printf(
        "[rank %d] threads_late_second_side: under MPS only with TEST_P2P_LATE_MPS=1 (it can hang: P2P.md, known "
        "problem 21); not run\n",
        rank);
    late_end(comms);
    return;
  }
  uint64_t given_up_before = mpn_p2p_done_given_up();
  pthread_barrier_t sync;
  pthread_barrier_init(&sync, NULL, 2);
  pthread_t t[2];
  late_arg_t args[2];
  for (int i = 0; i < 2; i++) {
    args[i] = (late_arg_t){comms[i], i, dev, 0, &sync};
    pthread_create(&t[i], NULL, late_side, &args[i]);
  }
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    EXPECT(args[i].bad == 0);
  }
  pthread_barrier_destroy(&sync);
  cudaDeviceSynchronize();
  late_end(comms); /* (the finalize marks of their streams go back with them) */
  uint64_t given_up = mpn_p2p_done_given_up() - given_up_before;
  int out = mpn_event_out(dev) - out_before;
  if (by_events) EXPECT(given_up > 0); /* (else the step tests nothing) */
  EXPECT(out == 0);
  printf(
      "[rank %d] threads_late_second_side: ranks of one process order by %s; first sides that gave up %llu, "
      "events handed out after %d\n",
      rank, by_events ? "events (MPS)" : "flags (no MPS: no event is used)", (unsigned long long)given_up, out);
}
