/*
 * ipc_closer.c - the thread that closes CUDA IPC imports (see ipc_closer.h):
 * a queue served in order, whose entries stay listed until their close
 * returns, so that an open that the driver refuses while an import of the
 * same memory is being closed can wait for that close alone.
 */
#define _GNU_SOURCE /* pthread_rwlock_clockrdlock, pthread_cond_clockwait */
#include "cuda/ipc_closer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/debug.h"
#include "cuda/device.h"
#include "cuda/ipc_held.h"

static struct {
  pthread_mutex_t lock;
  pthread_cond_t work;      /* something was queued */
  pthread_cond_t done;      /* a close returned (waited on with CLOCK_MONOTONIC deadlines) */
  mpn_ipc_closing_t* items; /* in order; items[0] is being closed, listed until its close returns */
  int n, cap;
  int stop; /* the thread ends (at exit, when idle) */
  pthread_t thread;
  pid_t pid; /* the process whose thread serves the queue; 0: none yet */
  int hurry; /* threads waiting in mpn_ipc_closer_wait: closes start at once */
  int running; /* items[0] is being closed */
  int joined;  /* the thread was joined (or is being: mpn_ipc_closer_stop) */
} closer = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/*
 * Launches hold the gate shared while they enqueue; the closing thread
 * holds it alone for each close, which it starts only once the process is
 * quiet (quiet_fn: no launch's work is left on the GPU).  The close then
 * waits for the application's own work only, which waits for no peer, and
 * no launch can add work that does meanwhile: a call of another thread
 * that waits with the close (a stream's creation, bench/ipc_close.cu)
 * cannot stand in the way of work the close waits for.
 */
static pthread_rwlock_t gate = PTHREAD_RWLOCK_INITIALIZER;
static int (*quiet_fn)(void);

/*
 * But the application's own work may wait for a peer too (a host function
 * that waits for MPI, a memory wait of its own), for something the peer
 * does only once this host is past the launch: a launch that waited for
 * that close would wait for good (docs/P2P.md, known problem 17).  So a
 * launch waits for a running close only until it has run GATE_WAIT_NS (as
 * long as the closing thread's poll), then goes on without the gate.  A
 * launch that waits, or goes on so, is counted before it waits, and no
 * close starts while any is counted (the count is read after the quiet
 * check, which may take long); one that gets the gate is uncounted.
 * Where the close's import maps memory of another GPU, most of the
 * launch's calls then go on beside it; where it maps memory of the
 * launch's own GPU, nearly every call of the process waits with the close
 * (stream memory operations and waits for events do not: bench/ipc_close.cu
 * section 3), so there the launch waits for it all the same.
 */
#define GATE_WAIT_NS (20ull * 1000000ull)
static int ungated;             /* launches waiting past a close, or going on without the gate */
static uint64_t close_since_ns; /* CLOCK_MONOTONIC when the running close took the gate; 0: none */

/* How often the closing thread asks whether the process is quiet: each
 * asking may read words from the device (core/drain.c), which costs a
 * time-sliced GPU a switch. */
#define QUIET_POLL_US 20000
/* How long the start of the process's exit waits for a close under way. */
#define STOP_AT_EXIT_MS 1000

/*
 * One close, in the context of the device that opened the mapping.  (A
 * device synchronize first, so that the close would find nothing to wait
 * for, kept other threads' calls going but invalidated another thread's
 * graph capture on the GPU: docs/P2P.md, known problem 17.)
 */
static void close_one(const mpn_ipc_closing_t* c) {
  MPN_TRACE(MPN_SUBSYS_IPC, "closing import at %p (device %d)", c->mapping, c->dev);
  cudaError_t err = cudaSetDevice(c->dev);
  if (err == cudaSuccess) err = cudaIpcCloseMemHandle(c->mapping);
  if (err != cudaSuccess) {
    cudaGetLastError();
    MPN_WARN("CUDA IPC: closing the import at %p failed: %s", c->mapping, cudaGetErrorString(err));
  }
  MPN_TRACE(MPN_SUBSYS_IPC, "closed import at %p", c->mapping);
  mpn_ipc_held_remove(c); /* (after the close: until then the owner's new allocation cannot be mapped here) */
}

int mpn_ipc_closer_launch_begin(void) {
  if (pthread_rwlock_tryrdlock(&gate) == 0) return 1;
  __atomic_add_fetch(&ungated, 1, __ATOMIC_SEQ_CST);
  uint64_t since = __atomic_load_n(&close_since_ns, __ATOMIC_ACQUIRE), now = mpn_clock_now_ns();
  uint64_t deadline = (since ? since : now) + GATE_WAIT_NS;
  if (deadline > now) {
    struct timespec until = mpn_clock_timespec(deadline);
    if (pthread_rwlock_clockrdlock(&gate, CLOCK_MONOTONIC, &until) == 0) {
      __atomic_sub_fetch(&ungated, 1, __ATOMIC_SEQ_CST);
      return 1;
    }
  }
  MPN_TRACE(MPN_SUBSYS_IPC, "a launch goes on beside a close of an IPC import that has run for %llu us",
            since ? (unsigned long long)((mpn_clock_now_ns() - since) / 1000) : 0ull);
  return 0;
}

void mpn_ipc_closer_launch_end(int gated) {
  if (gated)
    pthread_rwlock_unlock(&gate);
  else
    __atomic_sub_fetch(&ungated, 1, __ATOMIC_SEQ_CST);
}

void mpn_ipc_closer_set_quiet(int (*quiet)(void)) { __atomic_store_n(&quiet_fn, quiet, __ATOMIC_RELEASE); }

/* Waits until a close may start: returns 1 with the gate held, once no
 * launch runs and the process is quiet, or 0 at once where nobody said how
 * to tell (no communicator yet) or a thread waits for closes (an import's
 * last resort, mpn_ipc_closer_wait, from within a launch); -1 when the
 * process exits (what is left goes with it). */
static int close_slot(void) {
  for (;;) {
    pthread_mutex_lock(&closer.lock);
    int hurry = closer.hurry > 0, stop = closer.stop;
    pthread_mutex_unlock(&closer.lock);
    if (stop) return -1;
    int (*quiet)(void) = __atomic_load_n(&quiet_fn, __ATOMIC_ACQUIRE);
    if (hurry || quiet == NULL) return 0;
    if (pthread_rwlock_trywrlock(&gate) == 0) {
      if (__atomic_load_n(&ungated, __ATOMIC_SEQ_CST) == 0 && quiet() &&
          __atomic_load_n(&ungated, __ATOMIC_SEQ_CST) == 0) {
        __atomic_store_n(&close_since_ns, mpn_clock_now_ns(), __ATOMIC_RELEASE);
        return 1;
      }
      pthread_rwlock_unlock(&gate);
    }
    usleep(QUIET_POLL_US);
  }
}

static void* closer_main(void* arg) {
  (void)arg;
  /* Another thread may be capturing a graph in global mode, which forbids
   * this thread's closes unless it is relaxed (closes on the enqueuing
   * thread were made in relaxed mode too). */
  enum cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&relaxed) != cudaSuccess) cudaGetLastError();
  pthread_mutex_lock(&closer.lock);
  for (;;) {
    while (closer.n == 0 && !closer.stop) pthread_cond_wait(&closer.work, &closer.lock);
    if (closer.n == 0) break;
    mpn_ipc_closing_t c = closer.items[0];
    pthread_mutex_unlock(&closer.lock);
    int gated = close_slot();
    if (gated < 0) {
      pthread_mutex_lock(&closer.lock);
      break;
    }
    pthread_mutex_lock(&closer.lock);
    if (closer.stop) { /* came while close_slot waited: mpn_ipc_closer_stop said none runs, so none starts */
      if (gated) {
        __atomic_store_n(&close_since_ns, 0, __ATOMIC_RELEASE);
        pthread_rwlock_unlock(&gate);
      }
      break;
    }
    int skip = closer.items[0].skip; /* (dropped meanwhile: the device was reset) */
    closer.running = !skip;
    pthread_mutex_unlock(&closer.lock);
    if (!skip) close_one(&c);
    if (gated) {
      __atomic_store_n(&close_since_ns, 0, __ATOMIC_RELEASE);
      pthread_rwlock_unlock(&gate);
    }
    pthread_mutex_lock(&closer.lock);
    memmove(&closer.items[0], &closer.items[1], (size_t)(closer.n - 1) * sizeof(closer.items[0]));
    closer.n--;
    closer.running = 0;
    pthread_cond_broadcast(&closer.done);
  }
  pthread_mutex_unlock(&closer.lock);
  return NULL;
}

/* At exit, an idle thread is ended and joined, unless mpn_ipc_closer_stop
 * (atexit, earlier) joined it; one still in a close (which waits for GPU
 * work that may never end) is left to the process's end, and one waiting
 * for the process to be quiet starts no more closes (CUDA is being torn
 * down). */
__attribute__((destructor)) static void closer_stop(void) {
  /* A child of fork has no thread of its own, and its copy of the lock may
   * have been taken by another thread at the fork: it is left alone. */
  if (__atomic_load_n(&closer.pid, __ATOMIC_ACQUIRE) != getpid()) return;
  pthread_mutex_lock(&closer.lock);
  int idle = closer.n == 0 && !closer.joined;
  closer.stop = 1;
  closer.joined |= idle;
  pthread_cond_signal(&closer.work);
  pthread_mutex_unlock(&closer.lock);
  if (idle) pthread_join(closer.thread, NULL);
}

int mpn_ipc_closer_stop(int64_t timeout_ms) {
  if (__atomic_load_n(&closer.pid, __ATOMIC_ACQUIRE) != getpid()) return 0; /* (see closer_stop) */
  struct timespec until = mpn_clock_after_ms(timeout_ms);
  pthread_mutex_lock(&closer.lock);
  closer.stop = 1;
  pthread_cond_signal(&closer.work);
  int rc = 0;
  while (closer.running && rc != ETIMEDOUT)
    rc = pthread_cond_clockwait(&closer.done, &closer.lock, CLOCK_MONOTONIC, &until);
  int idle = !closer.running;
  /* With no close running, none starts any more (closer_main looks at the
   * stop before each): the thread ends within a poll or one check of quiet,
   * closes queued or not, and is joined here within the same deadline, so
   * that a stop with closes still queued leaves no ended thread unjoined
   * (the destructor joins only a thread with nothing queued). */
  int join = idle && !closer.joined;
  closer.joined |= join;
  pthread_mutex_unlock(&closer.lock);
  if (join && pthread_clockjoin_np(closer.thread, NULL, CLOCK_MONOTONIC, &until) != 0) {
    pthread_mutex_lock(&closer.lock); /* (still in its check of quiet: the destructor may join it) */
    closer.joined = 0;
    pthread_mutex_unlock(&closer.lock);
  }
  return idle;
}

/* Registered with atexit when the thread starts, after CUDA's own exit
 * handler (the process imported memory by then), so it runs before CUDA's
 * teardown: a close beside that teardown could fail or crash, and the
 * imports need no closing then (the process's end unmaps them). */
static void closer_stop_at_exit(void) { mpn_ipc_closer_stop(STOP_AT_EXIT_MS); }

/* Under the lock: a thread serves this process's queue (a child of fork
 * has none of its parent's threads); 0 when none could be started. */
static int thread_ready(void) {
  pid_t self = getpid();
  if (closer.pid == self) return 1;
  if (pthread_create(&closer.thread, NULL, closer_main, NULL) != 0) return 0;
  int first = closer.pid == 0; /* (a child of fork has its parent's handler) */
  __atomic_store_n(&closer.pid, self, __ATOMIC_RELEASE);
  closer.n = 0;      /* (a parent's entries are not this process's) */
  closer.joined = 0; /* (nor its thread) */
  closer.stop = 0;   /* (nor its stop: the new thread reads it under the lock, after this) */
  if (first) atexit(closer_stop_at_exit);
  return 1;
}

/* Under the lock: room for one more entry. */
static int room(void) {
  if (closer.n < closer.cap) return 1;
  int cap = closer.cap ? 2 * closer.cap : 32;
  mpn_ipc_closing_t* grown = realloc(closer.items, (size_t)cap * sizeof(*grown));
  if (grown == NULL) return 0;
  closer.items = grown;
  closer.cap = cap;
  return 1;
}

/* Under the lock: this process's queue was stopped (mpn_ipc_closer_stop,
 * at the start of its exit).  Its thread ends or has ended, and no close
 * starts any more: a close queued now would stay pending for good, and the
 * waits for closes (the last communicator's end, mpn_ipc_closer_drain_for)
 * would wait for it until their deadline. */
static int stopped_here(void) { return closer.stop && closer.pid == getpid(); }

void mpn_ipc_closer_push(const mpn_ipc_closing_t* c) {
  pthread_mutex_lock(&closer.lock);
  if (stopped_here()) {
    pthread_mutex_unlock(&closer.lock);
    /* Not closed here either: CUDA's teardown comes next, and the
     * process's end unmaps the import (its held record stays: it is). */
    MPN_TRACE(MPN_SUBSYS_IPC, "import at %p left to the process's exit (the closing thread stopped)", c->mapping);
    return;
  }
  int queued = thread_ready() && room();
  if (queued) {
    closer.items[closer.n++] = *c;
    closer.items[closer.n - 1].skip = 0;
    pthread_cond_signal(&closer.work);
  }
  pthread_mutex_unlock(&closer.lock);
  if (!queued) {
    MPN_WARN(
        "CUDA IPC: no thread to close the import at %p on (out of memory or threads); closing it here, "
        "which waits for this process's GPU work",
        c->mapping);
    int saved = mpn_cuda_device_enter(c->dev);
    close_one(c);
    mpn_cuda_device_leave(saved);
  }
}

/* Under the lock: whether a queued or running close matches. */
static int matching(uint64_t owner, int dev, uint64_t base, uint64_t size, const cudaIpcMemHandle_t* handle) {
  for (int i = 0; i < closer.n; i++) {
    const mpn_ipc_closing_t* c = &closer.items[i];
    if (c->owner != owner || c->dev != dev) continue;
    if (mpn_ipc_ranges_overlap(c->base, c->size, base, size) ||
        (handle != NULL && memcmp(&c->handle, handle, sizeof(*handle)) == 0))
      return 1;
  }
  return 0;
}

int mpn_ipc_closer_wait(uint64_t owner, int dev, uint64_t base, uint64_t size, const cudaIpcMemHandle_t* handle,
                        int64_t timeout_ms) {
  struct timespec until = mpn_clock_after_ms(timeout_ms);
  pthread_mutex_lock(&closer.lock);
  closer.hurry++;
  int rc = 0;
  while (matching(owner, dev, base, size, handle) && rc != ETIMEDOUT)
    rc = pthread_cond_clockwait(&closer.done, &closer.lock, CLOCK_MONOTONIC, &until);
  int clear = !matching(owner, dev, base, size, handle);
  closer.hurry--;
  pthread_mutex_unlock(&closer.lock);
  return clear;
}

int mpn_ipc_closer_drain_for(int64_t timeout_ms) {
  struct timespec until = mpn_clock_after_ms(timeout_ms);
  pthread_mutex_lock(&closer.lock);
  closer.hurry++;
  int rc = 0;
  while (closer.n > 0 && rc != ETIMEDOUT)
    rc = pthread_cond_clockwait(&closer.done, &closer.lock, CLOCK_MONOTONIC, &until);
  int clear = closer.n == 0;
  closer.hurry--;
  pthread_mutex_unlock(&closer.lock);
  return clear;
}

int mpn_ipc_closer_pending(void) {
  pthread_mutex_lock(&closer.lock);
  int n = closer.n;
  pthread_mutex_unlock(&closer.lock);
  return n;
}

void mpn_ipc_closer_drain(void) {
  pthread_mutex_lock(&closer.lock);
  while (closer.n > 0) pthread_cond_wait(&closer.done, &closer.lock);
  pthread_mutex_unlock(&closer.lock);
}

void mpn_ipc_closer_forget(int dev) {
  pthread_mutex_lock(&closer.lock);
  for (int i = 0; i < closer.n; i++)
    if (closer.items[i].dev == dev) closer.items[i].skip = 1;
  while (closer.n > 0 && closer.running && closer.items[0].dev == dev) pthread_cond_wait(&closer.done, &closer.lock);
  pthread_mutex_unlock(&closer.lock);
}
