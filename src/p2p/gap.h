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
 * completed.  Where the stream still had work queued when "start" was
 * recorded, the gap is the GPU's time between the launches; where it ran
 * dry, the gap also holds the host's time, so it counts only if it is short
 * even so.  The answer starts as "quiet" (delegation) and changes after two
 * counted samples in a row that disagree with it.  The first two samples
 * are waited for (gap.c), so the host is at most a few launches ahead when
 * the answer first changes; later ones start once in 32 launches, 256
 * while the answer is "quiet".
 */
typedef struct {
  cudaEvent_t end, start;  /* timing events of device dev, made on first use */
  int dev;
  int broken;              /* the events could not be made: no samples */
  cudaStream_t stream;     /* the stream of the sample in flight */
  int state;               /* MPN_GAP_IDLE, MPN_GAP_ENDED, MPN_GAP_TIMED */
  int busy;                /* the stream had work queued when "start" was recorded */
  int against;             /* counted samples in a row against the answer */
  int skip;                /* launches before the next sample starts */
  int computes;            /* the answer: GPU work runs between launches (0 at first) */
  int learned;             /* samples read (counted or not), up to the number learning takes */
  int impatient;           /* a learning wait ran out: no more of them */
  float last_us;           /* the last counted sample's gap (logged at destroy) */
  uint64_t samples;        /* samples counted */
} mpn_gap_t;

enum { MPN_GAP_IDLE = 0, MPN_GAP_ENDED, MPN_GAP_TIMED };

/**
 * Before a launch on stream s of device dev (current): reads a completed
 * sample, and records "start" if an "end" on s is waiting for it.  Returns
 * whether GPU work of at least MPINCCL_SLICED_GAP_US runs between launches,
 * as far as the samples tell (0 when the parameter is 0).
 */
int mpn_gap_launch_begin(mpn_gap_t* g, int dev, cudaStream_t s);

/** After a launch on stream s of device dev (current): records "end" when a sample is due. */
void mpn_gap_launch_end(mpn_gap_t* g, int dev, cudaStream_t s);

/** Destroys g's events. */
void mpn_gap_destroy(mpn_gap_t* g);

#endif /* MPN_P2P_GAP_H_ */
