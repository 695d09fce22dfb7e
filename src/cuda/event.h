/*
 * event.h - a pool of CUDA events per device, for ordering the streams of
 * ranks that live in one process: one side records, the other waits and
 * gives the event back, so no event is recorded again before its waiter
 * enqueued its wait.
 */
#ifndef MPN_CUDA_EVENT_H_
#define MPN_CUDA_EVENT_H_

#include <cuda_runtime.h>

#include "nccl.h"

/** An event of device dev (the current device), without timing. */
ncclResult_t mpn_event_get(int dev, cudaEvent_t* out);

/** Gives an event of device dev back to the pool. */
void mpn_event_put(int dev, cudaEvent_t ev);

/** An event of device dev recorded on s (where s's work stands now), or,
 *  if one cannot be had or recorded, 0 with nothing held and CUDA's last
 *  error as it was before the call. */
int mpn_event_mark(int dev, cudaStream_t s, cudaEvent_t* out);

/** How many of device dev's pooled events are handed out (made by
 *  mpn_event_get and not given back): 0 once every rank of the process is
 *  idle, whatever it exchanged (tests). */
int mpn_event_out(int dev);

/**
 * The event that stands for "stream s got this far", one per stream of
 * device dev (the current device) for the life of the process (one per
 * thread for the per-thread default stream): recorded again by every
 * launch, so whoever keeps it sees the latest record.  Never for a stream
 * being captured (asks s's mpn_cuda_stream_id).  A handle that comes back
 * for a new stream (cudaStreamGetId tells) gets another event while the
 * old one's last record has not completed: the old stream's keepers are
 * not made to wait for the new stream's work instead of their own.
 */
ncclResult_t mpn_event_of_stream(cudaStream_t s, int dev, cudaEvent_t* out);

/** Forgets device dev's events, pooled and per stream, without destroying
 * them: the program reset the device (core/renew.h), and their handles died
 * with its context (a stream made since may have an old stream's handle). */
void mpn_event_forget(int dev);

#endif /* MPN_CUDA_EVENT_H_ */
