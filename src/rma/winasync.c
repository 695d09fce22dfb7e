/*
 * winasync.c - a non-blocking communicator's window calls outside a group
 * (winasync.h): each on a thread of its own, which holds the communicator
 * until it is done (a destroy or abort waits for it, as for a group's
 * launch) and runs the call as ncclGroupEnd runs a queued one, in the
 * call's turn among the communicator's collectives.
 */
#include "rma/winasync.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/turn.h"
#include "cuda/device.h"
#include "rma/wingroup.h"

int mpn_win_async_wanted(ncclComm_t comm) { return mpn_comm_is_live(comm) && comm->config.blocking == 0; }

int mpn_win_async_pending(const struct ncclComm* comm) {
  return __atomic_load_n(&comm->win_pending, __ATOMIC_ACQUIRE) > 0;
}

/* A background thread's start: below MPI_THREAD_MULTIPLE its MPI calls go
 * through the threads that poll (ncclCommGetAsyncError drives them, as for
 * a creation); a new thread has no CUDA context until it sets a device. */
static void async_begin(const struct ncclComm* comm) {
  mpn_chan_worker_begin();
  if (comm->cuda_dev >= 0) mpn_cuda_forget(cudaSetDevice(comm->cuda_dev));
}

/* comm's background call is done: ncclCommGetAsyncError no longer answers
 * ncclInProgress for it, and comm is let go of (last: a destroy frees comm
 * once this is done). */
static void async_done(struct ncclComm* comm) {
  __atomic_sub_fetch(&comm->win_pending, 1, __ATOMIC_ACQ_REL);
  mpn_comm_release(comm);
}

static void* async_main(void* arg) {
  mpn_win_job_t* job = arg;
  struct ncclComm* comm = job->comm;
  async_begin(comm);
  ncclResult_t res = mpn_win_jobs_run(job); /* (frees job) */
  if (res != ncclSuccess) mpn_comm_fail_async(comm, res, "%s", mpn_error_last(NULL));
  mpn_chan_worker_end();
  async_done(comm);
  return NULL;
}

/* Starts fn(arg) on a detached thread; 0 or the error of pthread. */
static int async_thread(void* (*fn)(void*), void* arg) {
  pthread_attr_t attr;
  pthread_t t;
  int err = pthread_attr_init(&attr);
  if (err == 0) err = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (err == 0) err = pthread_create(&t, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return err;
}

ncclResult_t mpn_win_async(const mpn_win_job_t* job) {
  const char* caller = mpn_win_job_caller(job);
  struct ncclComm* comm = job->comm;
  MPN_CHECK(mpn_comm_check(comm, caller, 0));
  MPN_CHECK(mpn_comm_hold_for(comm, caller)); /* the thread's hold, from here on */
  mpn_win_job_t* copy = NULL;
  ncclResult_t res = mpn_win_job_make(job, caller, &copy);
  if (res != ncclSuccess) {
    mpn_comm_release(comm);
    return res;
  }
  __atomic_add_fetch(&comm->win_pending, 1, __ATOMIC_ACQ_REL);
  int err = async_thread(async_main, copy);
  if (err == 0) return ncclInProgress;
  mpn_turn_pass(&copy->turn); /* later calls of the communicator must not wait for it */
  mpn_win_jobs_free(copy);
  async_done(comm);
  return mpn_error_set(comm, ncclSystemError, "%s: cannot start a thread for comm %p's window call: %s", caller,
                       (void*)comm, strerror(err));
}

/* A group's window calls in the background, and the communicators they
 * hold pending (each once). */
typedef struct {
  mpn_win_job_t* jobs;
  int n;
  struct ncclComm* comms[];
} group_calls_t;

int mpn_win_async_group_wanted(const mpn_win_job_t* jobs) {
  int wanted = jobs != NULL;
  for (const mpn_win_job_t* job = jobs; job && wanted; job = job->next) {
    /* Held to read it (another thread may free it): one gone is failed by
     * the group's own run, on this thread. */
    wanted = mpn_comm_hold_serial(job->comm, job->comm_serial);
    if (!wanted) break;
    wanted = job->comm->config.blocking == 0;
    mpn_comm_release(job->comm);
  }
  return wanted;
}

static void* group_main(void* arg) {
  group_calls_t* g = arg;
  async_begin(g->comms[0]);
  mpn_win_jobs_exec(g->jobs);       /* (lanes: a thread per communicator, each on its device) */
  for (int i = 0; i < g->n; i++) {  /* each communicator's first failure, in call order */
    const mpn_win_job_t* job = g->jobs;
    /* (not a call of a group that failed: the group returned its error) */
    while (job && (job->comm != g->comms[i] || job->result == ncclSuccess || job->forced != ncclSuccess))
      job = job->next;
    if (job) mpn_comm_fail_async(g->comms[i], job->result, "%s", job->error);
  }
  mpn_win_jobs_free(g->jobs);
  mpn_chan_worker_end();
  for (int i = 0; i < g->n; i++) async_done(g->comms[i]);
  free(g);
  return NULL;
}

ncclResult_t mpn_win_async_group(mpn_win_job_t* jobs) {
  int n = 0;
  for (mpn_win_job_t* job = jobs; job; job = job->next) n++;
  group_calls_t* g = calloc(1, sizeof(*g) + (size_t)n * sizeof(g->comms[0]));
  for (mpn_win_job_t* job = jobs; g && job; job = job->next) {
    int seen = 0;
    for (int i = 0; i < g->n && !seen; i++) seen = g->comms[i] == job->comm;
    if (seen || !mpn_comm_hold_serial(job->comm, job->comm_serial)) continue; /* (a gone one fails in the run) */
    __atomic_add_fetch(&job->comm->win_pending, 1, __ATOMIC_ACQ_REL);
    g->comms[g->n++] = job->comm;
  }
  int err = g == NULL ? ENOMEM : g->n == 0 ? EINVAL : 0;
  if (err == 0) {
    g->jobs = jobs;
    err = async_thread(group_main, g);
  }
  if (err == 0) return ncclInProgress;
  for (int i = 0; g && i < g->n; i++) async_done(g->comms[i]);
  free(g);
  return mpn_win_jobs_run(jobs); /* here, then: the calls still end as the peers' do */
}
