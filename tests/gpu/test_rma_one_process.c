/*
 * test_rma_one_process.c - test_rma's steps with several ranks of one
 * process (ncclCommInitAll): a thread per rank (a ring of puts, puts from
 * two streams), one thread registering their windows in one group, and
 * ranks on every GPU.  Every byte put is checked.
 */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "mpinccl.h"
#include "pattern.h"
#include "test_rma.h"

/*
 * Several ranks of one process, one thread each: a ring of puts.  The
 * threads allocate their counter for pattern_check before the exchange,
 * and none checks before every thread has enqueued its puts and waits: a
 * thread blocked in a check's copy to pageable memory holds a lock of the
 * CUDA driver that other calls (cudaLaunchHostFunc at least) wait for.
 */
typedef struct {
  ncclComm_t comm;
  int rank, n, bad, failed;
  pthread_barrier_t* sync;
  volatile int stage; /* how far the thread got (threads_streams): a hang names its step */
  int dev;            /* the communicators' device: a new thread starts on device 0 */
} thread_arg_t;

/* A thread's window and buffers go, once every thread is done putting. */
static void thread_finish(thread_arg_t* a, ncclWindow_t w, void* buf, void* src) {
  pthread_barrier_wait(a->sync); /* no rank deregisters while another still puts */
  a->failed |= ncclCommWindowDeregister(a->comm, w) != ncclSuccess;
  pthread_barrier_wait(a->sync); /* cudaFree may synchronize the device */
  ncclMemFree(buf);
  ncclMemFree(src);
}

static void* thread_ring(void* v) {
  thread_arg_t* a = v;
  size_t bytes = 65536;
  cudaSetDevice(a->dev);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  void *buf, *src;
  ncclWindow_t w = NULL;
  a->failed |= ncclMemAlloc(&buf, bytes) != ncclSuccess || ncclMemAlloc(&src, bytes) != ncclSuccess;
  cudaMemsetAsync(buf, 0, bytes, st); /* on st: see window() */
  pattern_fill(src, bytes, seed_of(a->rank, (a->rank + 1) % a->n, 30), st);
  pattern_check(buf, 0, 0, st); /* the counter, and a synchronization */
  a->failed |= ncclCommWindowRegister(a->comm, buf, bytes, &w, 0) != ncclSuccess;
  ncclWaitSignalDesc_t d = {1, (a->rank + a->n - 1) % a->n, 0, 0};
  a->failed |= ncclPutSignal(src, bytes, ncclInt8, (a->rank + 1) % a->n, w, 0, 0, 0, 0, a->comm, st) != ncclSuccess;
  a->failed |= ncclWaitSignal(1, &d, a->comm, st) != ncclSuccess;
  pthread_barrier_wait(a->sync);
  a->bad = pattern_check(buf, bytes, seed_of(d.peer, a->rank, 30), st) != 0;
  thread_finish(a, w, buf, src);
  cudaStreamDestroy(st);
  return NULL;
}

/* Three ranks of one process (ncclCommInitAll), each driven by a thread running fn. */
static void threads_run(void* (*fn)(void*)) {
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
    args[i] = (thread_arg_t){comms[i], i, N, 0, 0, &sync, 0, dev};
    pthread_create(&t[i], NULL, fn, &args[i]);
  }
  for (int i = 0; i < N; i++) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    if (pthread_timedjoin_np(t[i], NULL, &until) != 0) {
      for (int j = 0; j < N; j++) fprintf(stderr, "[rank %d] thread %d at stage %d\n", rank, j, args[j].stage);
      pthread_join(t[i], NULL);
    }
    EXPECT(args[i].failed == 0);
    EXPECT(args[i].bad == 0);
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
  pthread_barrier_destroy(&sync);
}

void threads_ring(void) { threads_run(thread_ring); }

/* A ring of puts through windows w of the three ranks comms (from src
 * into buf, bytes each, pattern seed k), in one group, checked. */
static void ring_through(ncclComm_t* comms, ncclWindow_t* w, void** src, void** buf, size_t bytes, int k,
                         const char* step) {
  enum { N = 3 };
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < N; i++) {
    ncclWaitSignalDesc_t d = {1, (i + N - 1) % N, 0, 0};
    EXPECT_OK(ncclPutSignal(src[i], bytes, ncclInt8, (i + 1) % N, w[i], 0, 0, 0, 0, comms[i], stream));
    EXPECT_OK(ncclWaitSignal(1, &d, comms[i], stream));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int i = 0; i < N; i++) {
    unsigned long long bad = pattern_check(buf[i], bytes, seed_of((i + N - 1) % N, i, k), stream);
    if (bad) fprintf(stderr, "[rank %d] %s: comm %d got %llu of %zu bytes wrong\n", rank, step, i, bad, bytes);
    EXPECT(bad == 0);
  }
}

/*
 * One thread driving three ranks of one process (ncclCommInitAll), as NCCL
 * programs do: their windows registered in one group (each call only
 * queues; the handles come at ncclGroupEnd, made for the three ranks at
 * once), a ring of puts through them in one group, then deregistered in
 * one group.  Made at once, the first registration waited for ranks this
 * thread had not reached and timed out.
 */
void windows_in_group(void) {
  enum { N = 3 };
  ncclComm_t comms[N];
  harness_init_all_here(comms, N);
  size_t bytes = 65536 + 8;
  void *buf[N], *src[N];
  ncclWindow_t w[N];
  int made = 1;
  for (int i = 0; i < N; i++) {
    buf[i] = dev_alloc(bytes);
    src[i] = dev_alloc(bytes);
    cudaMemsetAsync(buf[i], 0, bytes, stream); /* on stream: see window() */
    pattern_fill(src[i], bytes, seed_of(i, (i + 1) % N, 35), stream);
  }
  pattern_check(buf[0], 0, 0, stream); /* a synchronization */
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < N; i++) {
    EXPECT_OK(ncclCommWindowRegister(comms[i], buf[i], bytes, &w[i], 0));
    EXPECT(w[i] == NULL); /* not before ncclGroupEnd */
  }
  EXPECT_OK(ncclGroupEnd());
  for (int i = 0; i < N; i++) made &= w[i] != NULL;
  EXPECT(made);
  if (made) {
    ring_through(comms, w, src, buf, bytes, 35, "windows_in_group");
    EXPECT_OK(ncclGroupStart());
    for (int i = 0; i < N; i++) EXPECT_OK(ncclCommWindowDeregister(comms[i], w[i]));
    EXPECT_OK(ncclGroupEnd());
  }
  for (int i = 0; i < N; i++) {
    EXPECT_OK(ncclMemFree(buf[i]));
    EXPECT_OK(ncclMemFree(src[i]));
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
}

/* Polls the communicators until none answers ncclInProgress (30 s at
 * most); returns the first other answer that is not ncclSuccess. */
static ncclResult_t settled(ncclComm_t* comms, int n) {
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n; i++) {
    ncclResult_t state = ncclInProgress;
    for (int k = 0; k < 30000 && state == ncclInProgress; k++) {
      if (ncclCommGetAsyncError(comms[i], &state) != ncclSuccess) break;
      if (state == ncclInProgress) usleep(1000);
    }
    if (state != ncclSuccess && first == ncclSuccess) first = state;
  }
  return first;
}

/*
 * One thread driving three non-blocking ranks of one process, NCCL's way:
 * each window call outside a group returns ncclInProgress at once, the
 * handle comes once ncclCommGetAsyncError says ncclSuccess, and so does
 * the end of each deregistration.  Made to the end in the call, the first
 * registration waited for ranks this thread had not reached and failed at
 * the bootstrap's timeout.  A ring of puts through the windows checks them.
 * Then the same calls in groups, whose ncclGroupEnd returns ncclInProgress.
 */
void windows_nonblocking(void) {
  enum { N = 3 };
  ncclComm_t comms[N];
  ncclUniqueId id;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  EXPECT_OK(ncclGetUniqueId(&id));
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < N; i++) {
    ncclResult_t made = ncclCommInitRankConfig(&comms[i], N, id, i, &cfg);
    EXPECT(made == ncclSuccess || made == ncclInProgress);
  }
  ncclResult_t ended = ncclGroupEnd();
  EXPECT(ended == ncclSuccess || ended == ncclInProgress);
  EXPECT(settled(comms, N) == ncclSuccess);
  size_t bytes = 65536 + 8;
  void *buf[N], *src[N];
  ncclWindow_t w[N];
  for (int i = 0; i < N; i++) {
    buf[i] = dev_alloc(bytes);
    src[i] = dev_alloc(bytes);
    cudaMemsetAsync(buf[i], 0, bytes, stream); /* on stream: see window() */
    pattern_fill(src[i], bytes, seed_of(i, (i + 1) % N, 36), stream);
  }
  pattern_check(buf[0], 0, 0, stream); /* a synchronization */
  for (int i = 0; i < N; i++)          /* (w[i] is filled in the background: not read until settled) */
    EXPECT(ncclCommWindowRegister(comms[i], buf[i], bytes, &w[i], 0) == ncclInProgress);
  EXPECT(settled(comms, N) == ncclSuccess);
  int made = 1;
  for (int i = 0; i < N; i++) made &= w[i] != NULL;
  EXPECT(made);
  if (made) {
    ring_through(comms, w, src, buf, bytes, 36, "windows_nonblocking");
    for (int i = 0; i < N; i++) EXPECT(ncclCommWindowDeregister(comms[i], w[i]) == ncclInProgress);
    EXPECT(settled(comms, N) == ncclSuccess);
  }
  /* The same in groups: ncclGroupEnd returns ncclInProgress, the calls go on
   * in the background. */
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < N; i++) EXPECT_OK(ncclCommWindowRegister(comms[i], buf[i], bytes, &w[i], 0));
  EXPECT(ncclGroupEnd() == ncclInProgress);
  EXPECT(settled(comms, N) == ncclSuccess);
  made = 1;
  for (int i = 0; i < N; i++) made &= w[i] != NULL;
  EXPECT(made);
  if (made) {
    for (int i = 0; i < N; i++) pattern_fill(src[i], bytes, seed_of(i, (i + 1) % N, 37), stream);
    ring_through(comms, w, src, buf, bytes, 37, "windows_nonblocking in groups");
    EXPECT_OK(ncclGroupStart());
    for (int i = 0; i < N; i++) EXPECT_OK(ncclCommWindowDeregister(comms[i], w[i]));
    EXPECT(ncclGroupEnd() == ncclInProgress);
    EXPECT(settled(comms, N) == ncclSuccess);
  }
  for (int i = 0; i < N; i++) {
    EXPECT_OK(ncclMemFree(buf[i]));
    EXPECT_OK(ncclMemFree(src[i]));
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
}

/*
 * Ranks of one process on every GPU (ncclCommInitAll, two per GPU, up to
 * 8), one thread, a ring of signals in one group on a default stream
 * handle, which names another stream on each device: the legacy stream,
 * then the per-thread one.  Each rank fills a buffer of its GPU, signals the
 * next rank and waits for the one before, whose buffer it then checks
 * (peer access): a wait issued on another device's stream would let the
 * check run first, a signal issued early would let it read before the
 * fill.  Held back 50 ms: the first GPU's stream, then the others'.  Rank
 * 0 only; with one GPU there is nothing to tell apart.
 */
void init_all_devices(void) {
  enum { MAX = 8 };
  int dev, devs[MAX];
  ncclComm_t comms[MAX];
  cudaGetDevice(&dev);
  int n = harness_init_all_devices("test_rma: init_all_devices", comms, devs, MAX);
  if (n == 0) return;
  size_t bytes = 1 << 20;
  void* buf[MAX];
  for (int i = 0; i < n; i++) {
    cudaSetDevice(devs[i]);
    EXPECT(cudaMalloc(&buf[i], bytes) == cudaSuccess);
  }
  for (int round = 0; round < 4; round++) {
    cudaStream_t h = round % 2 == 0 ? (cudaStream_t)0 : cudaStreamPerThread;
    harness_hold_devices(devs[0], round >= 2, h);
    for (int i = 0; i < n; i++) {
      cudaSetDevice(devs[i]);
      cudaMemsetAsync(buf[i], 0, bytes, h);
      pattern_fill(buf[i], bytes, seed_of(i, (i + 1) % n, 90 + round), h);
    }
    EXPECT_OK(ncclGroupStart());
    for (int i = 0; i < n; i++) {
      ncclWaitSignalDesc_t d = {1, (i + n - 1) % n, 0, 0};
      EXPECT_OK(ncclSignal((i + 1) % n, 0, 0, 0, comms[i], h));
      EXPECT_OK(ncclWaitSignal(1, &d, comms[i], h));
    }
    EXPECT_OK(ncclGroupEnd());
    for (int k = 0; k < n; k++) {
      /* The held GPUs' ranks last: a signal that left before its data
       * was written (an alias stream not forked) is read on the others. */
      int i = harness_device_order(devs, n, k, round >= 2), from = (i + n - 1) % n;
      cudaSetDevice(devs[i]);
      unsigned long long bad = pattern_check(buf[from], bytes, seed_of(from, i, 90 + round), h);
      if (bad)
        fprintf(stderr,
                "[rank %d] init_all_devices round %d: comm %d (GPU %d) read %llu of %zu bytes of "
                "comm %d before they were written\n",
                rank, round, i, devs[i], bad, bytes, from);
      EXPECT(bad == 0);
    }
  }
  for (int i = 0; i < n; i++) {
    cudaSetDevice(devs[i]);
    cudaDeviceSynchronize();
    cudaFree(buf[i]);
    EXPECT_OK(ncclCommDestroy(comms[i]));
  }
  cudaSetDevice(dev);
}

/*
 * Several ranks of one process, one thread each, each putting to the next
 * from two streams, the first held back on the GPU for 0.2 s: the
 * multi-stream signal order (signal_streams) between ranks of one process.
 * Run alone (tests/gpu/test_rma_threads.sh) it also catches kernels the
 * library loads at their first launch (src/cuda/kernels.c).
 */
static void* thread_streams(void* v) {
  thread_arg_t* a = v;
  size_t bytes = 65536;
  int to = (a->rank + 1) % a->n;
  cudaSetDevice(a->dev);
  cudaStream_t st, held, other;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
  void *buf, *src;
  ncclWindow_t w = NULL;
  a->failed |= ncclMemAlloc(&buf, 2 * bytes) != ncclSuccess || ncclMemAlloc(&src, 2 * bytes) != ncclSuccess;
  cudaMemsetAsync(buf, 0, 2 * bytes, st); /* on st: see window() */
  for (int b = 0; b < 2; b++) pattern_fill((char*)src + b * bytes, bytes, seed_of(a->rank, to, 40 + b), st);
  pattern_check(buf, 0, 0, st); /* the counter, and a synchronization */
  a->stage = 1;
  a->failed |= ncclCommWindowRegister(a->comm, buf, 2 * bytes, &w, 0) != ncclSuccess;
  a->stage = 2;
  hold_stream(held, 200);
  a->failed |= ncclPutSignal(src, bytes, ncclInt8, to, w, 0, 0, 0, 0, a->comm, held) != ncclSuccess;
  a->failed |= ncclPutSignal((char*)src + bytes, bytes, ncclInt8, to, w, bytes, 0, 0, 0, a->comm, other) != ncclSuccess;
  ncclWaitSignalDesc_t d = {2, (a->rank + a->n - 1) % a->n, 0, 0};
  a->failed |= ncclWaitSignal(1, &d, a->comm, st) != ncclSuccess;
  pthread_barrier_wait(a->sync);
  a->stage = 3;
  for (int b = 0; b < 2; b++)
    a->bad += pattern_check((char*)buf + b * bytes, bytes, seed_of(d.peer, a->rank, 40 + b), st) != 0;
  a->stage = 4;
  cudaStreamSynchronize(held);
  cudaStreamSynchronize(other);
  thread_finish(a, w, buf, src);
  a->stage = 5;
  cudaStreamDestroy(st);
  cudaStreamDestroy(held);
  cudaStreamDestroy(other);
  return NULL;
}

void threads_streams(void) { threads_run(thread_streams); }
