/*
 * event.c - the event pools: one stack per device under one lock.  Events
 * are created on demand and kept for the life of the process.
 */
#include "cuda/event.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/error.h"
#include "cuda/device.h"

#define MPN_EVENT_DEVICES 64

static struct {
  cudaEvent_t* free;
  int n, cap;
  int live; /* made by mpn_event_get and not destroyed: in the pool or handed out */
} pools[MPN_EVENT_DEVICES];
static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER;

ncclResult_t mpn_event_get(int dev, cudaEvent_t* out) {
  if (dev >= 0 && dev < MPN_EVENT_DEVICES) {
    pthread_mutex_lock(&event_lock);
    int have = pools[dev].n > 0;
    if (have) *out = pools[dev].free[--pools[dev].n];
    pthread_mutex_unlock(&event_lock);
    if (have) return ncclSuccess;
  }
  MPN_CUDA_CHECK(cudaEventCreateWithFlags(out, cudaEventDisableTiming));
  if (dev >= 0 && dev < MPN_EVENT_DEVICES) {
    pthread_mutex_lock(&event_lock);
    pools[dev].live++;
    pthread_mutex_unlock(&event_lock);
  }
  return ncclSuccess;
}

int mpn_event_mark(int dev, cudaStream_t s, cudaEvent_t* out) {
  cudaEvent_t ev = NULL;
  if (mpn_event_get(dev, &ev) != ncclSuccess) return 0; /* (its own error forgotten) */
  cudaError_t err = cudaEventRecord(ev, s);
  if (err == cudaSuccess) {
    *out = ev;
    return 1;
  }
  mpn_cuda_forget(err);
  mpn_event_put(dev, ev);
  return 0;
}

int mpn_event_out(int dev) {
  if (dev < 0 || dev >= MPN_EVENT_DEVICES) return 0;
  pthread_mutex_lock(&event_lock);
  int out = pools[dev].live - pools[dev].n;
  pthread_mutex_unlock(&event_lock);
  return out;
}

void mpn_event_put(int dev, cudaEvent_t ev) {
  if (ev == NULL) return;
  if (dev < 0 || dev >= MPN_EVENT_DEVICES) {
    mpn_cuda_forget(cudaEventDestroy(ev));
    return;
  }
  pthread_mutex_lock(&event_lock);
  if (pools[dev].n == pools[dev].cap) {
    int cap = pools[dev].cap ? 2 * pools[dev].cap : 64;
    cudaEvent_t* grown = realloc(pools[dev].free, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
      pools[dev].live--;
      pthread_mutex_unlock(&event_lock);
      mpn_cuda_forget(cudaEventDestroy(ev));
      return;
    }
    pools[dev].free = grown;
    pools[dev].cap = cap;
  }
  pools[dev].free[pools[dev].n++] = ev;
  pthread_mutex_unlock(&event_lock);
}

static struct {
  cudaStream_t s;
  unsigned long long id; /* mpn_cuda_stream_id of the stream s named when ev was made or renewed */
  int dev;
  cudaEvent_t ev;
} * stream_events;
static int n_stream_events, cap_stream_events;

/* Events of destroyed streams whose last record had not completed when a
 * new stream came back at their handle: whoever keeps one waits for that
 * record, so none is recorded again until it completed (then one serves a
 * new stream: a later record only makes its keepers wait longer). */
static struct {
  int dev;
  cudaEvent_t ev;
} * retired;
static int n_retired, cap_retired;

/* The handles that name a different stream in each thread (the per-thread
 * default stream, and handle 0 where a program is built to mean it): their
 * events are told apart by stream id, so that one thread's record never
 * stands for another thread's work.  Other handles name one stream while it
 * lives (keyed by handle, the table stays as small as the live streams);
 * the id tells when a handle came back for a new stream. */
static int per_thread(cudaStream_t s) { return s == cudaStreamPerThread || s == NULL; }

/* Whether ev's last record completed (a failed query: not known). */
static int event_done(cudaEvent_t ev) {
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter(); /* (another thread may be capturing) */
  cudaError_t err = cudaEventQuery(ev);
  mpn_cuda_relaxed_leave(mode);
  mpn_cuda_forget(err);
  return err == cudaSuccess;
}

/* A new stream's event (under event_lock): a retired one of dev whose
 * record completed, else a new one. */
static ncclResult_t stream_event_new(int dev, cudaEvent_t* out) {
  for (int i = 0; i < n_retired; i++)
    if (retired[i].dev == dev && event_done(retired[i].ev)) {
      *out = retired[i].ev;
      retired[i] = retired[--n_retired];
      return ncclSuccess;
    }
  cudaError_t err = cudaEventCreateWithFlags(out, cudaEventDisableTiming);
  if (err == cudaSuccess) return ncclSuccess;
  cudaGetLastError();
  return mpn_error_set(NULL, ncclUnhandledCudaError, "cudaEventCreateWithFlags: %s", cudaGetErrorString(err));
}

/* The handle of entry i now names the stream numbered id (the program
 * destroyed i's stream and made another): i's event goes on serving only if
 * its last record completed (under event_lock). */
static ncclResult_t stream_event_renew(int i, unsigned long long id) {
  cudaEvent_t ev = stream_events[i].ev;
  if (!event_done(ev)) {
    if (n_retired == cap_retired) {
      int cap = cap_retired ? 2 * cap_retired : 8;
      void* grown = realloc(retired, (size_t)cap * sizeof(*retired));
      if (grown == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
      retired = grown;
      cap_retired = cap;
    }
    MPN_CHECK(stream_event_new(stream_events[i].dev, &ev));
    retired[n_retired].dev = stream_events[i].dev;
    retired[n_retired++].ev = stream_events[i].ev;
  }
  stream_events[i].ev = ev;
  stream_events[i].id = id;
  return ncclSuccess;
}

/* A new entry for stream s (under event_lock); its index, or -1. */
static int stream_event_add(cudaStream_t s, unsigned long long id, int dev, ncclResult_t* res) {
  if (n_stream_events == cap_stream_events) {
    int cap = cap_stream_events ? 2 * cap_stream_events : 16;
    void* grown = realloc(stream_events, (size_t)cap * sizeof(*stream_events));
    if (grown == NULL) {
      *res = mpn_error_set(NULL, ncclSystemError, "out of memory");
      return -1;
    }
    stream_events = grown;
    cap_stream_events = cap;
  }
  cudaEvent_t ev;
  *res = stream_event_new(dev, &ev);
  if (*res != ncclSuccess) return -1;
  stream_events[n_stream_events].s = s;
  stream_events[n_stream_events].id = id;
  stream_events[n_stream_events].dev = dev;
  stream_events[n_stream_events].ev = ev;
  return n_stream_events++;
}

ncclResult_t mpn_event_of_stream(cudaStream_t s, int dev, cudaEvent_t* out) {
  ncclResult_t res = ncclSuccess;
  unsigned long long id = mpn_cuda_stream_id(s);
  pthread_mutex_lock(&event_lock);
  int i = 0;
  while (i < n_stream_events &&
         (stream_events[i].s != s || stream_events[i].dev != dev || (per_thread(s) && stream_events[i].id != id)))
    i++;
  if (i == n_stream_events)
    i = stream_event_add(s, id, dev, &res);
  else if (stream_events[i].id != id)
    res = stream_event_renew(i, id);
  if (res == ncclSuccess) *out = stream_events[i].ev;
  pthread_mutex_unlock(&event_lock);
  return res;
}

void mpn_event_forget(int dev) {
  pthread_mutex_lock(&event_lock);
  if (dev >= 0 && dev < MPN_EVENT_DEVICES) pools[dev].n = pools[dev].live = 0;
  for (int i = 0; i < n_stream_events;)
    if (stream_events[i].dev == dev)
      stream_events[i] = stream_events[--n_stream_events];
    else
      i++;
  for (int i = 0; i < n_retired;)
    if (retired[i].dev == dev)
      retired[i] = retired[--n_retired];
    else
      i++;
  pthread_mutex_unlock(&event_lock);
}
