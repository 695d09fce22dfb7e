/*
 * wingroup.h - window registration and deregistration called inside a
 * group: queued, and done at ncclGroupEnd, each communicator's in call
 * order and different communicators' at once, so that one thread can
 * register a window on every rank it drives (NCCL fills the handle by the
 * end of the group, too).
 */
#ifndef MPN_RMA_WINGROUP_H_
#define MPN_RMA_WINGROUP_H_

#include <stdint.h>

#include "core/comm.h"
#include "nccl.h"

/** One queued call. */
typedef struct mpn_win_job {
  int deregister; /**< 0: ncclCommWindowRegister; 1: ncclCommWindowDeregister */
  ncclComm_t comm;
  uint64_t comm_serial; /**< comm->serial at the call: a comm made later at its address is another */
  int held;             /**< comm held while the queued calls run (wingroup.c) */
  void* buff; /**< register: its arguments */
  size_t size;
  ncclWindow_t* out;
  int flags;
  ncclWindow_t win;    /**< deregister: its window */
  ncclResult_t forced; /**< not ncclSuccess: the group failed; it joins its peers, failing (mpn_win_jobs_refuse) */
  mpn_turn_t turn;     /**< its turn among comm's bootstrap collectives, taken at the call (core/turn.h) */
  ncclResult_t result; /**< how it ended */
  char error[512];     /**< and why it failed, for the thread that ends the group */
  struct mpn_win_job* next;
} mpn_win_job_t;

/**
 * A job for a window call of job->comm (checked: one still being created,
 * or one ready for the call as outside a group; refused otherwise): a
 * copy, which takes the call's turn among the communicator's collectives
 * now, whenever it runs (mpn_win_jobs_run).
 */
ncclResult_t mpn_win_job_make(const mpn_win_job_t* job, const char* caller, mpn_win_job_t** out);

/** The job of ncclCommWindowRegister(comm, buff, size, win, winFlags);
 *  clears *win, which stays NULL until the job is done. */
static inline mpn_win_job_t mpn_win_job_register(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                                 int winFlags) {
  if (win) *win = NULL;
  return (mpn_win_job_t){.comm = comm, .buff = buff, .size = size, .out = win, .flags = winFlags};
}

/** The job of ncclCommWindowDeregister(comm, win). */
static inline mpn_win_job_t mpn_win_job_deregister(ncclComm_t comm, ncclWindow_t win) {
  return (mpn_win_job_t){.deregister = 1, .comm = comm, .win = win};
}

/** The API call a job makes, for messages. */
static inline const char* mpn_win_job_caller(const mpn_win_job_t* job) {
  return job->deregister ? "ncclCommWindowDeregister" : "ncclCommWindowRegister";
}

/** Inside a group: queues the call (a registration's handle is NULL until
 *  the group ends); refuses a communicator as mpn_win_job_make does. */
ncclResult_t mpn_win_defer(const mpn_win_job_t* job);

/**
 * At ncclGroupEnd: does the queued calls, one thread per communicator when
 * there are several (each waits for its peers in the collective), and
 * frees them.  Returns the first failure in call order, its text on the
 * calling thread; every call is made whatever the others did, as peers
 * wait for each.
 */
ncclResult_t mpn_win_jobs_run(mpn_win_job_t* jobs);

/** mpn_win_jobs_run's work without the report: each job's result and
 *  error say how it ended (every job failed where it could not start);
 *  the jobs stay the caller's. */
void mpn_win_jobs_exec(mpn_win_job_t* jobs);

/**
 * A group that failed on this rank (why): its queued calls still join their
 * peers' collectives, as failures, so that every rank of each communicator
 * fails them together (dropped, a peer's call would pair with this rank's
 * next registration).  Where every one is on a non-blocking communicator
 * they go on in the background (mpn_win_async_group), as a group's that
 * did not fail.  Frees them; this thread's error text stays the group's.
 */
void mpn_win_jobs_refuse(mpn_win_job_t* jobs, ncclResult_t why);

/** Frees queued calls without making them. */
void mpn_win_jobs_free(mpn_win_job_t* jobs);

#endif /* MPN_RMA_WINGROUP_H_ */
