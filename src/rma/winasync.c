/*
 * winasync.c - a non-blocking communicator's window calls outside a group
 * (winasync.h): each on a thread of its own, which holds the communicator
 * until it is done (a destroy or abort waits for it, as for a group's
 * launch) and runs the call as ncclGroupEnd runs a queued one, in the
 * call's turn among the communicator's collectives.
 */
#include "rma/winasync.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/turn.h"
#include "rma/wingroup.h"

int mpn_win_async_wanted(ncclComm_t comm) { return mpn_comm_is_live(comm) && comm->config.blocking == 0; }

int mpn_win_async_pending(const struct ncclComm* comm) {
  return __atomic_load_n(&comm->win_pending, __ATOMIC_ACQUIRE) > 0;
}

static void* async_main(void* arg) {
  mpn_win_job_t* job = arg;
  struct ncclComm* comm = job->comm;
  /* Below MPI_THREAD_MULTIPLE its MPI calls go through the threads that
   * poll (ncclCommGetAsyncError drives them, as for a creation). */
  mpn_chan_worker_begin();
  if (comm->cuda_dev >= 0 && cudaSetDevice(comm->cuda_dev) != cudaSuccess) cudaGetLastError();
  ncclResult_t res = mpn_win_jobs_run(job); /* (frees job) */
  if (res != ncclSuccess) {
    /* The communicator's first asynchronous error, with the call's text. */
    int ok = ncclSuccess;
    mpn_error_set(comm, res, "%s", mpn_error_last(NULL));
    __atomic_compare_exchange_n(&comm->async_error, &ok, (int)res, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  mpn_chan_worker_end();
  __atomic_sub_fetch(&comm->win_pending, 1, __ATOMIC_ACQ_REL);
  mpn_comm_release(comm); /* last: a destroy frees comm once this is done */
  return NULL;
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
  pthread_attr_t attr;
  pthread_t t;
  int err = pthread_attr_init(&attr);
  if (err == 0) err = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (err == 0) err = pthread_create(&t, &attr, async_main, copy);
  pthread_attr_destroy(&attr);
  if (err == 0) return ncclInProgress;
  mpn_turn_pass(&copy->turn); /* later calls of the communicator must not wait for it */
  mpn_win_jobs_free(copy);
  __atomic_sub_fetch(&comm->win_pending, 1, __ATOMIC_ACQ_REL);
  mpn_comm_release(comm);
  return mpn_error_set(comm, ncclSystemError, "%s: cannot start a thread for comm %p's window call: %s", caller,
                       (void*)comm, strerror(err));
}
