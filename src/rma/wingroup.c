/*
 * wingroup.c - window (de)registration inside a group (wingroup.h): the
 * calls are collective, so made at once one thread driving several ranks
 * would wait in the first for ranks it has not reached yet.
 */
#include "rma/wingroup.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/group.h"
#include "core/turn.h"
#include "rma/winasync.h"
#include "rma/window.h"

ncclResult_t mpn_win_job_make(const mpn_win_job_t* job, const char* caller, mpn_win_job_t** out) {
  /* A live communicator only: one that is not cannot join its peers.  Its
   * serial tells it from one made later at its address (read held: another
   * thread may free it meanwhile). */
  ncclResult_t res = mpn_comm_check(job->comm, caller, MPN_COMM_NEED_LIVE);
  if (res == ncclSuccess) res = mpn_comm_hold_for(job->comm, caller);
  if (res != ncclSuccess) return res;
  /* One still being created is waited for when the call runs; any other
   * must be ready now, as outside a group.  A finalized, aborted or failed
   * one never will be: queued, its refusal came only when the call ran, in
   * the background on a non-blocking one (ncclInProgress, then the refusal
   * as the communicator's asynchronous error, after a finalize that had
   * succeeded). */
  if (__atomic_load_n(&job->comm->state, __ATOMIC_ACQUIRE) != MPN_COMM_INITIALIZING)
    res = mpn_comm_check(job->comm, caller, MPN_COMM_NEED_READY);
  if (res != ncclSuccess) {
    mpn_comm_release(job->comm);
    return res;
  }
  mpn_win_job_t* copy = malloc(sizeof(*copy));
  if (copy == NULL) {
    mpn_comm_release(job->comm);
    return mpn_error_set(NULL, ncclSystemError, "%s: out of memory", caller);
  }
  *copy = *job;
  copy->comm_serial = job->comm->serial;
  /* Its turn in call order, though it runs later (taken held; a job runs,
   * or passes it: job_run, lanes_run). */
  mpn_turn_take(&copy->comm->split_order, &copy->turn);
  mpn_comm_release(job->comm);
  *out = copy;
  return ncclSuccess;
}

ncclResult_t mpn_win_defer(const mpn_win_job_t* job) {
  mpn_win_job_t* copy = NULL;
  ncclResult_t res = mpn_win_job_make(job, mpn_win_job_caller(job), &copy);
  return mpn_group_fail(res == ncclSuccess ? mpn_group_add_win(copy) : res);
}

static void job_run(mpn_win_job_t* job) {
  job->result = job->deregister
                    ? mpn_win_deregister(job->comm, job->win, job->forced, &job->turn)
                    : mpn_win_register(job->comm, job->buff, job->size, job->out, job->flags, job->forced, &job->turn);
  mpn_turn_pass(&job->turn); /* (refused before its turn came: later calls must not wait for it) */
  if (job->result != ncclSuccess) snprintf(job->error, sizeof(job->error), "%s", mpn_error_last(NULL));
}

/* The calls of one communicator, in call order, on a thread of their own. */
typedef struct {
  ncclComm_t comm;
  mpn_win_job_t* jobs;
  pthread_t thread;
  int started, finished;
} lane_t;

static void* lane_main(void* arg) {
  lane_t* lane = arg;
  mpn_chan_worker_begin();
  /* Set even when current: a new thread has no CUDA context until then,
   * and the driver's pointer queries need one. */
  if (lane->comm->cuda_dev >= 0 && cudaSetDevice(lane->comm->cuda_dev) != cudaSuccess) cudaGetLastError();
  for (mpn_win_job_t* job = lane->jobs; job; job = job->next)
    if (job->held && job->comm == lane->comm) job_run(job);
  mpn_chan_worker_end();
  __atomic_store_n(&lane->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* The lanes' communicators, in order of first call; their count. */
static int lanes_find(mpn_win_job_t* jobs, lane_t* lanes, int most) {
  int n = 0;
  for (mpn_win_job_t* job = jobs; job; job = job->next) {
    if (!job->held) continue;
    int i = 0;
    while (i < n && lanes[i].comm != job->comm) i++;
    if (i < n) continue;
    if (n == most) return -1;
    lanes[n++] = (lane_t){.comm = job->comm, .jobs = jobs};
  }
  return n;
}

/* Several communicators: a thread each (peers of one may be this thread's
 * other ranks); below MPI_THREAD_MULTIPLE this thread makes their MPI
 * calls meanwhile.  A thread that cannot start fails its calls. */
static void lanes_run(lane_t* lanes, int n) {
  for (int i = 0; i < n; i++) {
    int err = pthread_create(&lanes[i].thread, NULL, lane_main, &lanes[i]);
    lanes[i].started = err == 0;
    if (err == 0) continue;
    for (mpn_win_job_t* job = lanes[i].jobs; job; job = job->next)
      if (job->held && job->comm == lanes[i].comm) {
        mpn_turn_pass(&job->turn); /* later calls of the communicator must not wait for it */
        job->result = ncclSystemError;
        snprintf(job->error, sizeof(job->error), "cannot start a thread for a window of comm %p: %s", (void*)job->comm,
                 strerror(err));
      }
  }
  for (int i = 0; i < n; i++) {
    while (lanes[i].started && !__atomic_load_n(&lanes[i].finished, __ATOMIC_ACQUIRE)) {
      mpn_chan_drive(MPN_CHAN_DRIVE_CREATE);
      usleep(50);
    }
    if (lanes[i].started) pthread_join(lanes[i].thread, NULL);
  }
}

/* Holds every job's communicator until its calls are done (an abort or
 * destroy of another thread waits for that), if it is still the one the
 * call named; a job whose communicator went meanwhile fails. */
static void jobs_hold(mpn_win_job_t* jobs) {
  for (mpn_win_job_t* job = jobs; job; job = job->next) {
    job->held = mpn_comm_hold_serial(job->comm, job->comm_serial);
    if (job->held) continue;
    job->result = ncclInvalidArgument;
    snprintf(job->error, sizeof(job->error), "%s: comm %p was destroyed or aborted before ncclGroupEnd made the call",
             mpn_win_job_caller(job), (void*)job->comm);
  }
}

static void jobs_release(mpn_win_job_t* jobs) {
  for (mpn_win_job_t* job = jobs; job; job = job->next)
    if (job->held) mpn_comm_release(job->comm);
}

/* Communicators still being created (non-blocking, in this group or an
 * earlier one) are waited for: each rank's creation ends, one way or the
 * other, within the bootstrap's timeout, and every rank then makes its
 * calls on a finished communicator.  Refusing them instead would depend on
 * timing, and a rank whose creation had ended first would register and
 * wait for a peer that refused. */
static void jobs_wait_created(mpn_win_job_t* jobs) {
  for (mpn_win_job_t* job = jobs; job; job = job->next)
    while (job->held && __atomic_load_n(&job->comm->state, __ATOMIC_ACQUIRE) == MPN_COMM_INITIALIZING) {
      mpn_chan_drive(MPN_CHAN_DRIVE_CREATE);
      usleep(50);
    }
}

void mpn_win_jobs_exec(mpn_win_job_t* jobs) {
  int n = 0;
  for (mpn_win_job_t* job = jobs; job; job = job->next) n++;
  lane_t* lanes = calloc((size_t)n + 1, sizeof(*lanes));
  if (lanes == NULL) {
    for (mpn_win_job_t* job = jobs; job; job = job->next) { /* their turns pass: later calls go on */
      if (mpn_comm_hold_serial(job->comm, job->comm_serial)) {
        mpn_turn_pass(&job->turn);
        mpn_comm_release(job->comm);
      }
      job->result = ncclSystemError;
      snprintf(job->error, sizeof(job->error), "%s: out of memory for the group's window calls",
               mpn_win_job_caller(job));
    }
    return;
  }
  jobs_hold(jobs);
  jobs_wait_created(jobs);
  int nlanes = lanes_find(jobs, lanes, n);
  if (nlanes == 1) /* on this thread, as outside a group */
    for (mpn_win_job_t* job = jobs; job; job = job->next) {
      if (job->held) job_run(job);
    }
  else if (nlanes > 1)
    lanes_run(lanes, nlanes);
  jobs_release(jobs);
  free(lanes);
}

ncclResult_t mpn_win_jobs_run(mpn_win_job_t* jobs) {
  mpn_win_jobs_exec(jobs);
  ncclResult_t first = ncclSuccess;
  for (mpn_win_job_t* job = jobs; job && first == ncclSuccess; job = job->next)
    if (job->result != ncclSuccess) first = mpn_error_set(NULL, job->result, "%s", job->error);
  mpn_win_jobs_free(jobs);
  return first;
}

void mpn_win_jobs_refuse(mpn_win_job_t* jobs, ncclResult_t why) {
  if (jobs == NULL) return;
  for (mpn_win_job_t* job = jobs; job; job = job->next) job->forced = why;
  char text[sizeof(jobs->error)];
  snprintf(text, sizeof(text), "%s", mpn_error_last(NULL));
  /* Non-blocking communicators': in the background, as a group's that did
   * not fail (made here, a thread driving several ranks, a group each,
   * waited in the first for ranks it had not reached yet). */
  if (mpn_win_async_group_wanted(jobs))
    (void)mpn_win_async_group(jobs);
  else
    (void)mpn_win_jobs_run(jobs);
  mpn_error_set(NULL, why, "%s", text); /* the group's own text again */
}

void mpn_win_jobs_free(mpn_win_job_t* jobs) {
  while (jobs) {
    mpn_win_job_t* next = jobs->next;
    free(jobs);
    jobs = next;
  }
}
