/*
 * lanes.c - forks of a caller's stream onto streams of the library's own
 * (lanes.h).  Events come from the device's pool and go back as soon as the
 * wait for them is enqueued: a wait uses the record it found.
 */
#include "cuda/lanes.h"

#include <string.h>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/event.h"

void mpn_fork_init(mpn_fork_t* f, cudaStream_t origin, int dev, mpn_lanes_t* lanes) {
  memset(f, 0, sizeof(*f));
  f->origin = origin;
  f->dev = dev;
  f->lanes = lanes;
}

/* The lanes of the caller's stream, made on first use at origin's priority;
 * NULL when they cannot be. */
static mpn_lane_set_t* lane_set(mpn_lanes_t* l, cudaStream_t origin) {
  unsigned long long id = mpn_cuda_stream_id(origin);
  mpn_lane_set_t* oldest = &l->set[0];
  for (int i = 0; i < MPN_LANE_SETS; i++) {
    mpn_lane_set_t* s = &l->set[i];
    if (s->made && s->owner == id) {
      s->used = ++l->clock;
      return s;
    }
    if (s->used < oldest->used) oldest = s;
  }
  for (int k = 0; k < MPN_LANES; k++)
    if (oldest->lane[k]) mpn_cuda_forget(cudaStreamDestroy(oldest->lane[k]));
  memset(oldest, 0, sizeof(*oldest));
  int priority = 0;
  cudaError_t got = cudaStreamGetPriority(origin, &priority);
  mpn_cuda_forget(got);
  if (got != cudaSuccess) priority = 0;
  for (int k = 0; k < MPN_LANES; k++)
    if (cudaStreamCreateWithPriority(&oldest->lane[k], cudaStreamNonBlocking, priority) != cudaSuccess) {
      cudaGetLastError();
      for (int j = 0; j < k; j++) mpn_cuda_forget(cudaStreamDestroy(oldest->lane[j]));
      memset(oldest, 0, sizeof(*oldest));
      return NULL;
    }
  oldest->owner = id;
  oldest->made = 1;
  oldest->used = ++l->clock;
  return oldest;
}

/* Ends the forking after a failure: the rest goes on origin, and the join
 * still joins the lanes forked so far (never a lane that did not wait for
 * start, whose work could run before origin's earlier work). */
static ncclResult_t fork_stop(mpn_fork_t* f, ncclResult_t res) {
  if (f->forked == 0) f->lanes = NULL;
  f->stopped = 1;
  return res;
}

ncclResult_t mpn_fork_next(mpn_fork_t* f, cudaStream_t* out) {
  *out = f->origin;
  if (f->lanes == NULL || f->stopped) return ncclSuccess;
  if (f->copies++ == 0) {
    f->set = lane_set(f->lanes, f->origin);
    if (f->set == NULL) return fork_stop(f, ncclSuccess);
    ncclResult_t got = mpn_event_get(f->dev, &f->start);
    if (got != ncclSuccess) return fork_stop(f, got);
    got = mpn_cuda_result(NULL, cudaEventRecord(f->start, f->origin), "marking where a fork's copies start");
    if (got != ncclSuccess) {
      mpn_event_put(f->dev, f->start);
      f->start = NULL;
      return fork_stop(f, got);
    }
    return ncclSuccess;
  }
  int k = (f->copies - 2) % MPN_LANES;
  if (k == f->forked) {
    ncclResult_t got =
        mpn_cuda_result(NULL, cudaStreamWaitEvent(f->set->lane[k], f->start, 0), "forking a lane from its stream");
    if (got != ncclSuccess) return fork_stop(f, got);
    f->forked++;
  }
  *out = f->set->lane[k];
  return ncclSuccess;
}

ncclResult_t mpn_fork_join(mpn_fork_t* f) {
  ncclResult_t res = ncclSuccess;
  for (int k = 0; k < f->forked; k++) {
    cudaEvent_t done;
    ncclResult_t got = mpn_event_get(f->dev, &done);
    if (got == ncclSuccess) {
      cudaError_t err = cudaEventRecord(done, f->set->lane[k]);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(f->origin, done, 0);
      got = mpn_cuda_result(NULL, err, "joining a copy lane to its stream");
      mpn_event_put(f->dev, done);
    }
    mpn_keep(&res, got);
  }
  if (f->start) mpn_event_put(f->dev, f->start);
  f->start = NULL;
  f->forked = f->copies = f->stopped = 0;
  return res;
}

void mpn_lanes_destroy(mpn_lanes_t* l) {
  for (int i = 0; i < MPN_LANE_SETS; i++)
    for (int k = 0; k < MPN_LANES; k++)
      if (l->set[i].lane[k]) mpn_cuda_forget(cudaStreamDestroy(l->set[i].lane[k]));
  memset(l, 0, sizeof(*l));
}
