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
  unsigned long long id; /* for the per-thread default stream: which thread's */
  int dev;
  cudaEvent_t ev;
} * stream_events;
static int n_stream_events, cap_stream_events;

/* The handles that name a different stream in each thread (the per-thread
 * default stream, and handle 0 where a program is built to mean it): their
 * events are told apart by stream id, so that one thread's record never
 * stands for another thread's work.  Other handles name one stream while it
 * lives (keyed by handle, the table stays as small as the live streams). */
static unsigned long long per_thread_id(cudaStream_t s) {
  return s == cudaStreamPerThread || s == NULL ? mpn_cuda_stream_id(s) : 0;
}

ncclResult_t mpn_event_of_stream(cudaStream_t s, int dev, cudaEvent_t* out) {
  ncclResult_t res = ncclSuccess;
  unsigned long long id = per_thread_id(s);
  pthread_mutex_lock(&event_lock);
  int i = 0;
  while (i < n_stream_events && (stream_events[i].s != s || stream_events[i].id != id || stream_events[i].dev != dev))
    i++;
  if (i == n_stream_events) {
    if (n_stream_events == cap_stream_events) {
      int cap = cap_stream_events ? 2 * cap_stream_events : 16;
      void* grown = realloc(stream_events, (size_t)cap * sizeof(*stream_events));
      if (grown == NULL) {
        pthread_mutex_unlock(&event_lock);
        return mpn_error_set(NULL, ncclSystemError, "out of memory");
      }
      stream_events = grown;
      cap_stream_events = cap;
    }
    cudaEvent_t ev;
    cudaError_t err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      cudaGetLastError();
      res = mpn_error_set(NULL, ncclUnhandledCudaError, "cudaEventCreateWithFlags: %s",
                          cudaGetErrorString(err));
    } else {
      stream_events[n_stream_events].s = s;
      stream_events[n_stream_events].id = id;
      stream_events[n_stream_events].dev = dev;
      stream_events[n_stream_events++].ev = ev;
    }
  }
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
  pthread_mutex_unlock(&event_lock);
}
