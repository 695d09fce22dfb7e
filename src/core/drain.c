/*
 * drain.c - the streams a communicator's operations went to, each with its
 * mark after the communicator's last group there (drain.h).  Streams are
 * told apart by their CUDA id, not their handle: a handle can be reused by a
 * new stream while the old one's work still runs.
 */
#include "core/drain.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/device.h"
#include "cuda/event.h"
#include "cuda/service.h"
#include "cuda/syncs.h"

/* Words that flag kernels and batches set, in device memory (a store to
 * host memory would cost the kernel a system-wide fence): one per stream in
 * use, per communicator.  A word's values only grow, whichever stream has it. */
#define DRAIN_WORDS 64

typedef struct {
  unsigned long long id; /* mpn_cuda_stream_id */
  cudaEvent_t ev;        /* recorded after groups whose last item was not a flag kernel */
  int word;              /* index of the stream's word, or -1 */
  uint64_t carried;      /* the last value handed to a flag kernel */
  uint64_t expected;     /* the value the word must reach */
} drain_stream_t;

struct mpn_drain {
  pthread_mutex_t lock;
  drain_stream_t* at;
  int n, cap;
  uint64_t* words;            /* DRAIN_WORDS in device memory; NULL: none */
  uint64_t words_used;        /* bit per word */
  uint64_t last[DRAIN_WORDS]; /* the last value handed out per word */
  uint64_t seen[DRAIN_WORDS]; /* the words as last read */
  int words_tried, warned;
  uint64_t by_event, by_kernel; /* marks made each way */
};

static int stream_done(const struct mpn_drain* d, const drain_stream_t* e) {
  if (e->word >= 0 && d->seen[e->word] < e->expected) return 0;
  cudaError_t q = cudaEventQuery(e->ev);
  if (q == cudaErrorNotReady) return 0;
  if (q != cudaSuccess) cudaGetLastError(); /* failed (a sticky error): nothing will run after it */
  return 1;
}

/* Reads the words into seen when a stream waits for one (relaxed capture
 * mode: another thread may be capturing), on dev's service stream, asked
 * for at each read since a cudaDeviceReset makes it anew (core/renew.c).
 * A read that fails because the context has a sticky error (nothing runs
 * on it any more) counts every word as written, as a failed event query
 * counts as done; another failure leaves them as they were, for the next
 * read. */
static void words_read(struct mpn_drain* d, int dev) {
  int want = 0;
  for (int i = 0; i < d->n && !want; i++) want = d->at[i].word >= 0 && d->seen[d->at[i].word] < d->at[i].expected;
  if (!want) return;
  uint64_t now[DRAIN_WORDS];
  int saved = mpn_cuda_device_enter(dev);
  cudaStream_t reader = mpn_cuda_service_stream(dev);
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  cudaError_t err = cudaMemcpyAsync(now, d->words, sizeof(now), cudaMemcpyDeviceToHost, reader);
  if (err == cudaSuccess) err = cudaStreamSynchronize(reader);
  mpn_cuda_forget(err);
  mpn_cuda_relaxed_leave(mode);
  mpn_cuda_device_leave(saved); /* the caller's device, as it was */
  if (err != cudaSuccess) {
    cudaError_t again = cudaStreamQuery(reader); /* a sticky error stays */
    mpn_cuda_forget(again);
    if (again != cudaSuccess && again != cudaErrorNotReady)
      for (int w = 0; w < DRAIN_WORDS; w++) d->seen[w] = d->last[w];
    return;
  }
  for (int w = 0; w < DRAIN_WORDS; w++) d->seen[w] = now[w];
}

/* Forgets the streams past their last mark; returns how many are not. */
static int drain_prune(struct mpn_drain* d, int dev) {
  words_read(d, dev);
  int k = 0;
  for (int i = 0; i < d->n; i++) {
    drain_stream_t* e = &d->at[i];
    if (!stream_done(d, e)) {
      d->at[k++] = *e;
      continue;
    }
    if (e->word >= 0) d->words_used &= ~(1ull << e->word);
    mpn_event_put(dev, e->ev);
  }
  d->n = k;
  return k;
}

static struct mpn_drain* drain_of(struct ncclComm* comm) {
  struct mpn_drain* d = __atomic_load_n(&comm->drain, __ATOMIC_ACQUIRE);
  if (d) return d;
  d = calloc(1, sizeof(*d));
  if (d == NULL) return NULL;
  pthread_mutex_init(&d->lock, NULL);
  struct mpn_drain* none = NULL;
  if (__atomic_compare_exchange_n(&comm->drain, &none, d, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return d;
  pthread_mutex_destroy(&d->lock);
  free(d);
  return none;
}

/* The entry of stream id, added if new; NULL when out of memory or events. */
static drain_stream_t* drain_entry(struct mpn_drain* d, unsigned long long id, int dev) {
  for (int i = 0; i < d->n; i++)
    if (d->at[i].id == id) return &d->at[i];
  if (d->n == d->cap && drain_prune(d, dev) == d->cap) {
    int cap = d->cap ? 2 * d->cap : 8;
    drain_stream_t* grown = realloc(d->at, (size_t)cap * sizeof(*grown));
    if (grown == NULL) return NULL;
    d->at = grown;
    d->cap = cap;
  }
  cudaEvent_t ev = NULL;
  if (mpn_event_get(dev, &ev) != ncclSuccess) return NULL;
  d->at[d->n] = (drain_stream_t){id, ev, -1, 0, 0};
  return &d->at[d->n++];
}

/* The words, at 0, made at the first kernel or batch that carries a mark
 * (on the current device, the communicator's), and read on the device's
 * service stream. */
static void words_make(struct mpn_drain* d) {
  d->words_tried = 1;
  void* words = NULL;
  if (mpn_cuda_alloc_zeroed(DRAIN_WORDS * sizeof(uint64_t), DRAIN_WORDS * sizeof(uint64_t), &words) != cudaSuccess)
    return; /* events only */
  d->words = words;
}

/* A word for e; 0 when none.  Its values go on from the word's last. */
static int word_take(struct mpn_drain* d, drain_stream_t* e) {
  if (e->word >= 0) return 1;
  if (!d->words_tried) words_make(d);
  if (d->words == NULL || d->words_used == ~0ull) return 0;
  int w = __builtin_ctzll(~d->words_used);
  d->words_used |= 1ull << w;
  e->word = w;
  e->carried = d->last[w]; /* a value handed out and then not enqueued may never have been written */
  e->expected = 0;
  return 1;
}

/* ------------------------------------------------- a group's launch -- */

typedef struct {
  struct ncclComm* comm;
  cudaStream_t s;
  unsigned long long id;
  int rma_too, shared, carried;
  uint64_t prev_expected;
} group_mark_t;

/* The launching thread's marks to make (one group at a time per thread). */
static __thread group_mark_t* marks;
static __thread int n_marks, cap_marks;

/* The list is kept from group to group, and freed when its thread ends
 * (thread storage holds only the pointer: without the key's destructor
 * every thread that ever launched a group left its list on the heap). */
static pthread_key_t marks_key;
static int marks_key_made;
static pthread_once_t marks_key_once = PTHREAD_ONCE_INIT;

static void marks_key_make(void) { marks_key_made = pthread_key_create(&marks_key, free) == 0; }

ncclResult_t mpn_drain_begin(struct ncclComm* comm, cudaStream_t s, unsigned long long id, int rma_too) {
  if (n_marks == cap_marks) {
    int cap = cap_marks ? 2 * cap_marks : 16;
    group_mark_t* grown = realloc(marks, (size_t)cap * sizeof(*grown));
    if (grown == NULL) /* (unlisted, the stream would be left out of the finalize's waits) */
      return mpn_error_set(comm, ncclSystemError,
                           "out of memory listing rank %d's work on stream %p for ncclCommFinalize to wait for (%d "
                           "marks): the group was not launched",
                           comm->rank, (void*)s, cap);
    marks = grown;
    cap_marks = cap;
    pthread_once(&marks_key_once, marks_key_make);
    if (marks_key_made) pthread_setspecific(marks_key, marks);
  }
  int shared = 0;
  for (int i = 0; i < n_marks; i++)
    if (marks[i].s == s) shared = marks[i].shared = 1;
  marks[n_marks++] = (group_mark_t){comm, s, id, rma_too, shared, 0, 0};
  return ncclSuccess;
}

static group_mark_t* mark_of(cudaStream_t s) {
  for (int i = 0; i < n_marks; i++)
    if (marks[i].s == s) return &marks[i];
  return NULL;
}

void mpn_drain_carry(cudaStream_t s, int from_rma, uint64_t* addr, uint64_t* value) {
  *addr = *value = 0;
  group_mark_t* m = mark_of(s);
  if (m == NULL || m->shared || m->carried || (!from_rma && m->rma_too)) return;
  struct mpn_drain* d = drain_of(m->comm);
  if (d == NULL) return;
  pthread_mutex_lock(&d->lock);
  drain_stream_t* e = drain_entry(d, m->id, m->comm->cuda_dev);
  if (e && word_take(d, e)) {
    m->prev_expected = e->expected;
    e->expected = d->last[e->word] = ++e->carried; /* now: a prune cannot take e before it is written */
    m->carried = 1;
    d->by_kernel++;
    *addr = (uint64_t)(uintptr_t)&d->words[e->word];
    *value = e->expected;
  }
  pthread_mutex_unlock(&d->lock);
}

void mpn_drain_keep_event(cudaStream_t s) {
  group_mark_t* m = mark_of(s);
  if (m) m->shared = 1; /* as for a stream of several communicators: never carried */
}

void mpn_drain_uncarry(cudaStream_t s) {
  group_mark_t* m = mark_of(s);
  if (m == NULL || !m->carried) return;
  struct mpn_drain* d = drain_of(m->comm);
  pthread_mutex_lock(&d->lock);
  drain_stream_t* e = drain_entry(d, m->id, m->comm->cuda_dev);
  if (e) e->expected = m->prev_expected;
  d->by_kernel--;
  pthread_mutex_unlock(&d->lock);
  m->carried = 0;
}

void mpn_drain_end(int dev) {
  int current = dev;
  for (int i = 0; i < n_marks; i++) {
    group_mark_t* m = &marks[i];
    if (m->carried) continue;
    struct mpn_drain* d = drain_of(m->comm);
    if (d == NULL) continue;
    mpn_cuda_switch_device(&current, m->comm->cuda_dev); /* the event's and the stream's */
    pthread_mutex_lock(&d->lock);
    drain_stream_t* e = drain_entry(d, m->id, m->comm->cuda_dev);
    cudaError_t err = e ? cudaEventRecord(e->ev, m->s) : cudaErrorMemoryAllocation;
    if (e) mpn_cuda_forget(err); /* (without an entry CUDA recorded nothing) */
    int warn = err != cudaSuccess && !d->warned;
    d->by_event += err == cudaSuccess;
    if (err != cudaSuccess) d->warned = 1;
    pthread_mutex_unlock(&d->lock);
    if (warn)
      MPN_WARN(
          "rank %d: cannot mark its work on stream %p (%s): ncclCommFinalize and ncclCommDestroy will not "
          "wait for it",
          m->comm->rank, (void*)m->s, cudaGetErrorString(err));
  }
  if (dev >= 0) mpn_cuda_switch_device(&current, dev);
  n_marks = 0;
}

/* ------------------------------------------------------- finalize -- */

/* A communicator whose device was reset (gone: comm.h, device_gone) has nothing
 * left to wait for: its marks are dropped without a CUDA call, and their
 * events are not given back to the pool, which holds new ones. */
static int drain_prune_of(struct ncclComm* comm, struct mpn_drain* d, int gone) {
  if (!gone) return drain_prune(d, comm->cuda_dev);
  d->n = 0;
  d->words_used = 0;
  return 0;
}

int mpn_drain_done(struct ncclComm* comm) {
  struct mpn_drain* d = __atomic_load_n(&comm->drain, __ATOMIC_ACQUIRE);
  if (d == NULL) return 1;
  pthread_mutex_lock(&d->lock);
  int pending = drain_prune_of(comm, d, __atomic_load_n(&comm->device_gone, __ATOMIC_ACQUIRE));
  pthread_mutex_unlock(&d->lock);
  return pending == 0;
}

ncclResult_t mpn_drain_wait(struct ncclComm* comm, const char* caller, ncclResult_t (*failed)(struct ncclComm*)) {
  long long limit = mpn_param_int(MPN_PARAM_FINALIZE_TIMEOUT);
  uint64_t start = mpn_clock_now_ns(), next_warn = start + 10000000000ull, failed_at = 0;
  useconds_t nap = 20;
  while (!mpn_drain_done(comm)) {
    uint64_t now = mpn_clock_now_ns();
    if (__atomic_load_n(&comm->abort_flag, __ATOMIC_ACQUIRE)) /* ncclCommAbort of another thread */
      return MPN_REFUSE(comm, ncclRemoteError, "%s: rank %d was aborted while it waited for its operations", caller,
                        comm->rank);
    ncclResult_t bad = failed ? failed(comm) : ncclSuccess;
    if (bad != ncclSuccess && failed_at == 0) failed_at = now;
    if (bad != ncclSuccess && now - failed_at > 1000000000ull)
      return MPN_REFUSE(comm, bad,
                        "%s: rank %d's operations were not done 1 s after the communicator reported %s; call "
                        "ncclCommAbort",
                        caller, comm->rank, ncclGetErrorString(bad));
    if (limit > 0 && now - start > (uint64_t)limit * 1000000000ull)
      return MPN_REFUSE(comm, ncclTimeout,
                        "%s: rank %d's operations were not done after MPINCCL_FINALIZE_TIMEOUT=%lld s (a "
                        "peer that never posts the matching call?)",
                        caller, comm->rank, limit);
    if (now > next_warn) {
      MPN_WARN("%s: rank %d still waits for its operations after %.0f s", caller, comm->rank,
               (double)(now - start) * 1e-9);
      next_warn = now + 10000000000ull;
    }
    usleep(nap);
    if (nap < 1000) nap *= 2;
  }
  return ncclSuccess;
}

void mpn_drain_counts(struct ncclComm* comm, uint64_t* by_event, uint64_t* by_kernel) {
  struct mpn_drain* d = __atomic_load_n(&comm->drain, __ATOMIC_ACQUIRE);
  *by_event = *by_kernel = 0;
  if (d == NULL) return;
  pthread_mutex_lock(&d->lock);
  *by_event = d->by_event;
  *by_kernel = d->by_kernel;
  pthread_mutex_unlock(&d->lock);
}

void mpn_drain_free(struct ncclComm* comm) {
  struct mpn_drain* d = comm->drain;
  if (d == NULL) return;
  MPN_INFO(MPN_SUBSYS_INIT, "rank %d: finalize marks: %llu by events, %llu by words (flag kernels or batches)",
           comm->rank, (unsigned long long)d->by_event, (unsigned long long)d->by_kernel);
  int gone = __atomic_load_n(&comm->device_gone, __ATOMIC_ACQUIRE);
  int pending = drain_prune_of(comm, d, gone);
  for (int i = 0; i < d->n; i++) mpn_event_put(comm->cuda_dev, d->at[i].ev);
  if (d->words && pending == 0 && !gone)
    mpn_cuda_forget(cudaFree(d->words)); /* else a kernel may still write them: left */
  free(d->at);
  pthread_mutex_destroy(&d->lock);
  free(d);
  comm->drain = NULL;
}

ncclResult_t mpn_drain_sync_issue(const mpn_driver_t* drv, mpn_sync_t* k, cudaStream_t s, int from_rma, int ends) {
  if (ends) mpn_drain_carry(s, from_rma, &k->mark, &k->mark_value);
  ncclResult_t res = mpn_sync_issue(drv, k, s);
  if (res != ncclSuccess && k->mark) mpn_drain_uncarry(s);
  return res;
}
