/*
 * gap.c - times the GPU work a rank runs between its launches (gap.h).
 * Asked only by launches with one other process of a time-sliced GPU; a
 * sample costs the host two event records and a few queries.
 */
#include "p2p/gap.h"

#include <unistd.h>

#include "core/clock.h"
#include "core/debug.h"
#include "core/param.h"
#include "cuda/device.h"

/* Counted samples in a row that must disagree before the answer changes;
 * also the samples read while learning. */
#define GAP_VOTES 2
/* While learning the host waits up to this long for the sample in flight. */
#define GAP_LEARN_WAIT_US 5000
/* Then a sample starts once in this many launches, enough to follow an
 * application's phases.  Fewer while the rank delegates: there a timing
 * event seems to cost the process that only signals a context switch
 * (8 B sendrecv on the GPU machine, one sample in 34 launches: 2.5 us more
 * per exchange than without samples). */
#define GAP_PERIOD 32
#define GAP_PERIOD_QUIET 256

static int events_made(mpn_gap_t* g, int dev) {
  if (g->end && g->dev == dev) return 1;
  if (g->broken) return 0;
  mpn_gap_destroy(g);
  if (cudaEventCreate(&g->end) != cudaSuccess || cudaEventCreate(&g->start) != cudaSuccess) {
    cudaGetLastError();
    mpn_gap_destroy(g);
    g->broken = 1;
    return 0;
  }
  g->dev = dev;
  return 1;
}

static void vote(mpn_gap_t* g, int computes, float gap_us) {
  g->samples++;
  g->last_us = gap_us;
  if (computes == g->computes) {
    g->against = 0;
    return;
  }
  if (++g->against < GAP_VOTES) return;
  g->computes = computes;
  g->against = 0;
  MPN_INFO(MPN_SUBSYS_P2P, "%.0f us between launches on stream %p: a launch with one other process of this "
           "time-sliced GPU now %s", gap_us, (void*)g->stream,
           computes ? "sends through the inbox (one hop)" : "delegates the copies to one process");
}

/* A completed sample is read; one still running stays in flight. */
static void read_sample(mpn_gap_t* g) {
  cudaError_t done = cudaEventQuery(g->start);
  if (done == cudaErrorNotReady) return; /* (not recorded as an error: nothing to clear) */
  float ms = 0;
  if (done == cudaSuccess && cudaEventElapsedTime(&ms, g->end, g->start) == cudaSuccess) {
    float us = ms * 1000.0f;
    int computes = us >= (float)mpn_param_int(MPN_PARAM_SLICED_GAP);
    if (g->busy || !computes) vote(g, computes, us); /* an idle stream's gap is the GPU's and the host's time */
  } else {
    cudaGetLastError();
  }
  g->state = MPN_GAP_IDLE;
  if (g->learned < GAP_VOTES) g->learned++;
  g->skip = g->learned < GAP_VOTES ? 0 : g->computes ? GAP_PERIOD : GAP_PERIOD_QUIET;
}

/*
 * The answer is needed on the host, where launches are decided, but comes
 * from the GPU, which may be many launches behind: a host that ran 128
 * small messages ahead would send them all the wrong way before the first
 * sample came back (8 B sendrecv at 44-138 us instead of 15 on the GPU
 * machine, when the answer started as "computes"), and a change to the
 * inbox found a host hundreds of launches ahead and stalled halo3d for
 * 0.1-0.2 s.  So the first samples are waited for, bounded: at the start
 * the host is at most a few launches ahead.  A wait that runs out (a peer
 * that starts late) ends the waiting.
 */
static void learn_wait(mpn_gap_t* g) {
  if (g->learned >= GAP_VOTES || g->impatient) return;
  uint64_t deadline = mpn_clock_now_ns() + (uint64_t)GAP_LEARN_WAIT_US * 1000;
  cudaError_t e;
  while ((e = cudaEventQuery(g->start)) == cudaErrorNotReady && mpn_clock_now_ns() < deadline) usleep(2);
  mpn_cuda_forget(e);
  if (e == cudaErrorNotReady) g->impatient = 1;
}

static int gap_launch_begin(mpn_gap_t* g, int dev, cudaStream_t s);

/* Its queries run in relaxed capture mode: another thread's global-mode
 * capture must not be invalidated by them (desk review). */
int mpn_gap_launch_begin(mpn_gap_t* g, int dev, cudaStream_t s) {
  if (mpn_param_int(MPN_PARAM_SLICED_GAP) <= 0) return 0;
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  int computes = gap_launch_begin(g, dev, s);
  mpn_cuda_relaxed_leave(mode);
  return computes;
}

static int gap_launch_begin(mpn_gap_t* g, int dev, cudaStream_t s) {
  if (g->state == MPN_GAP_TIMED) {
    learn_wait(g);
    read_sample(g);
  }
  if (g->state == MPN_GAP_ENDED) {
    if (s != g->stream || g->dev != dev) {
      g->state = MPN_GAP_IDLE;
    } else {
      cudaError_t q = cudaStreamQuery(s);
      mpn_cuda_forget(q); /* (not for cudaErrorNotReady, which the query did not record) */
      g->busy = q == cudaErrorNotReady;
      if (cudaEventRecord(g->start, s) == cudaSuccess) {
        g->state = MPN_GAP_TIMED;
      } else {
        cudaGetLastError();
        g->state = MPN_GAP_IDLE;
      }
    }
  }
  return g->computes;
}

void mpn_gap_launch_end(mpn_gap_t* g, int dev, cudaStream_t s) {
  if (mpn_param_int(MPN_PARAM_SLICED_GAP) <= 0 || g->state != MPN_GAP_IDLE) return;
  if (g->skip > 0) {
    g->skip--;
    return;
  }
  if (!events_made(g, dev)) return;
  if (cudaEventRecord(g->end, s) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  g->stream = s;
  g->state = MPN_GAP_ENDED;
}

void mpn_gap_destroy(mpn_gap_t* g) {
  if (g->end && cudaEventDestroy(g->end) != cudaSuccess) cudaGetLastError(); /* (a context already gone) */
  if (g->start && cudaEventDestroy(g->start) != cudaSuccess) cudaGetLastError();
  g->end = g->start = NULL;
  g->state = MPN_GAP_IDLE;
}
