/*
 * gap.h - whether a rank runs GPU work of its own between its launches,
 * timed on its stream.  On a time-sliced GPU that decides how a launch with
 * one other process of the GPU moves its data (p2p.c): delegation when
 * nothing runs between launches (only one process then needs the engines),
 * the inbox when the application computes (its context switches are paid
 * anyway, and one hop keeps each side's copies beside its own kernels).
 */
#ifndef MPN_P2P_GAP_H_
#define MPN_P2P_GAP_H_

#include <cuda_runtime.h>
#include <stdint.h>

/*
 * One sample at a time: an event after a launch ("end"), another where the
 * next launch on the same stream begins ("start"), read once both have
 * completed.  A sample counts only if the stream still had work queued when
 * "start" was recorded: a GPU that ran dry was waiting for the host, and the
 * gap would time the host.  The answer changes after two samples in a row
 * that disagree with it.  The first two are waited for (gap.c); later
 * ones start once in 32 launches (256 while delegating).  It starts as "computes": then the host keeps
 * within a few launches of the GPU (inbox slots), samples come at once and a
 * rank that runs nothing between launches soon delegates.  The other way,
 * from delegation, the host may be hundreds of launches ahead when the
 * answer changes, and the switch stalled halo3d once for 0.1-0.2 s.
 */
typedef struct {
  cudaEvent_t end, start;  /* timing events of device dev, made on first use */
  int dev;
  cudaStream_t stream;     /* the stream of the sample in flight */
  int state;               /* MPN_GAP_IDLE, MPN_GAP_ENDED, MPN_GAP_TIMED */
  int busy;                /* the stream had work queued when "start" was recorded */
  int against;             /* samples in a row against the answer */
  int skip;                /* launches before the next sample starts */
  int quiet;               /* the answer: no GPU work between launches (0 until samples say so) */
  float last_us;           /* the last sample's gap */
  uint64_t samples;        /* samples that counted */
} mpn_gap_t;

enum { MPN_GAP_IDLE = 0, MPN_GAP_ENDED, MPN_GAP_TIMED };

/**
 * Before a launch on stream s of device dev (current): reads a completed
 * sample, and records "start" if an "end" on s is waiting for it.  Returns
 * whether GPU work of at least MPINCCL_SLICED_GAP_US runs between launches
 * (as far as the samples tell; 0 when the parameter is 0).
 */
int mpn_gap_before(mpn_gap_t* g, int dev, cudaStream_t s);

/** After a launch on stream s of device dev (current): records "end" if no sample is in flight. */
void mpn_gap_after(mpn_gap_t* g, int dev, cudaStream_t s);

/** Destroys g's events. */
void mpn_gap_destroy(mpn_gap_t* g);

#endif /* MPN_P2P_GAP_H_ */
