/*
 * winasync.h - window registration and deregistration on a non-blocking
 * communicator outside a group: as NCCL's, the call returns ncclInProgress
 * and the work goes on in the background, so that one thread can make the
 * collective call on every rank it drives before any of them completes.
 */
#ifndef MPN_RMA_WINASYNC_H_
#define MPN_RMA_WINASYNC_H_

#include "nccl.h"

struct mpn_win_job;

/** Whether comm is a live communicator created non-blocking (its window
 *  calls outside a group go through this file). */
int mpn_win_async_wanted(ncclComm_t comm);

/**
 * Starts the call job describes (rma/wingroup.h) in the background: a
 * registration's handle is NULL until it is done, then the window.
 * ncclCommGetAsyncError answers ncclInProgress until then
 * (mpn_win_async_pending), and the call's error afterwards if it failed
 * (the communicator's asynchronous error, its text the call's).  Returns
 * ncclInProgress, or the refusal of a communicator that is not live, or
 * ncclSystemError.
 */
ncclResult_t mpn_win_async(const struct mpn_win_job* job);

/** Whether every call of a group's queued window calls (rma/wingroup.h) is
 *  on a live non-blocking communicator: ncclGroupEnd then makes them in
 *  the background (mpn_win_async_group). */
int mpn_win_async_group_wanted(const struct mpn_win_job* jobs);

/**
 * Makes a group's queued window calls in the background, as NCCL's
 * ncclGroupEnd does on non-blocking communicators: returns ncclInProgress
 * at once, and ncclCommGetAsyncError of each communicator answers
 * ncclInProgress until all the group's calls are done, then the first
 * failure of its own calls, if any (the communicator's asynchronous
 * error; not of calls forced to fail by a group that failed, which
 * returned its error: mpn_win_jobs_refuse).  Takes the jobs.  Where no thread can start, makes them here
 * (mpn_win_jobs_run) and returns what that does.
 */
ncclResult_t mpn_win_async_group(struct mpn_win_job* jobs);

/** Whether window calls of comm are still running in the background. */
int mpn_win_async_pending(const struct ncclComm* comm);

#endif /* MPN_RMA_WINASYNC_H_ */
