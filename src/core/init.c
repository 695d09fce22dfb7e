/*
 * init.c - making communicators: unique ids, ncclCommInitRank(Config),
 * ncclCommInitAll and mpincclCommInitMPI, and the creation jobs behind them,
 * which run inline, on one thread per rank (a group creating several ranks),
 * or in the background (config.blocking = 0).
 */

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/api.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/group.h"
#include "core/param.h"
#include "core/renew.h"
#include "core/turn.h"
#include "core/watchdog.h"
#ifdef HAVE_UCX
#include "ucx/net.h"
#endif
#include "cuda/device.h"
#include "cuda/kernels.h"
#include "cuda/service.h"
#include "cuda/sync.h"
#include "p2p/p2p.h"
#include "transport.h"

/* Once per process: version (NCCL_DEBUG=VERSION shows that line alone, as
 * NCCL's does) and parameters. */
static void log_version(void) {
  if (mpn_log_level < 0) mpn_log_init();
  int level = mpn_log_level == MPN_LOG_VERSION ? MPN_LOG_VERSION : MPN_LOG_INFO;
  MPN_LOG_AT(level, MPN_SUBSYS_INIT, "mpinccl %s, NCCL API %d.%d.%d (version code %d)", PACKAGE_VERSION, NCCL_MAJOR,
             NCCL_MINOR, NCCL_PATCH, NCCL_VERSION_CODE);
  mpn_params_log();
}

static void log_version_once(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, log_version);
}

/* Once per process: the cost of sharing a GPU between processes without MPS. */
static void warn_shared_gpu(const struct ncclComm* comm) {
  static int said;
  if (!comm->topo.shared_gpu_no_mps || __atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL)) return;
  MPN_INFO(MPN_SUBSYS_INIT,
           "several processes share a GPU without MPS: the GPU time-slices between them, so "
           "every exchange in which both need the copy or compute engines costs a context switch "
           "(about 70-150 us on an H200). Start MPS (nvidia-cuda-mps-control -d, same "
           "CUDA_MPS_PIPE_DIRECTORY for all ranks) to remove it");
}

/* Everything after the bootstrap: topology, transports, logs. */
static ncclResult_t comm_setup(struct ncclComm* comm) {
  MPN_CHECK(mpn_topo_discover(comm));
  MPN_CHECK(mpn_transport_choose(comm));
#ifdef HAVE_UCX
  MPN_CHECK(mpn_ucx_comm_setup(comm));
#endif
  MPN_CALLOC(comm->peer_gone, comm->nranks);
  MPN_CHECK(mpn_p2p_connect_local(comm));
  if (comm->nranks > 1 && mpn_param_int(MPN_PARAM_KERNEL_SYNC) > 0) mpn_sync_grid_prepare(comm->cuda_dev);
  MPN_CHECK(mpn_watchdog_start(comm));
  mpn_topo_log(comm);
  mpn_transport_log(comm);
  warn_shared_gpu(comm);
  return ncclSuccess;
}

static __thread mpn_order_t* thread_order;

/* The calling thread's order of MPI collectives; NULL if out of memory. */
static mpn_order_t* mpi_order(void) {
  if (thread_order == NULL) thread_order = calloc(1, sizeof(*thread_order));
  return thread_order;
}

typedef struct {
  MPI_Comm user, *dup;
  MPI_Request req;
  int err;
} mpi_dup_t;

static void mpi_dup_start(void* arg) {
  mpi_dup_t* d = arg;
  d->err = MPI_Comm_idup(d->user, d->dup, &d->req);
}

/* The library's duplicate of the program's communicator, in the creation's
 * MPI turn (the thread's creations' collectives in call order: made at the
 * call itself, before an earlier non-blocking creation's, it met another
 * process's in a different order and Open MPI hung): the set-up and later
 * splits use it, never the program's communicator, on which only this
 * MPI_Comm_idup runs.  Non-blocking, so that a peer that never comes ends
 * in ncclTimeout as the rest of the set-up does; a duplication given up
 * stays pending in MPI (which cannot cancel it), and the cell MPI writes
 * its handle into is kept for good. */
static ncclResult_t mpi_dup_make(mpn_init_job_t* job, const volatile int* abort) {
  MPI_Comm* made = malloc(sizeof(*made));
  if (made == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  *made = MPI_COMM_NULL;
  mpi_dup_t dup = {job->mpi_user, made, MPI_REQUEST_NULL, MPI_SUCCESS};
  int ran = mpn_chan_call(mpi_dup_start, &dup, 0, abort);
  ncclResult_t res = ncclSuccess;
  if (ran == MPN_CHAN_NO_MEMORY)
    res = ncclSystemError; /* (its text is set) */
  else if (ran != 0)
    res = mpn_error_set(NULL, abort && *abort ? ncclRemoteError : ncclInvalidUsage, "mpincclCommInitMPI: %s",
                        abort && *abort ? "aborted" : "MPI was finalized during the set-up");
  else if (dup.err != MPI_SUCCESS)
    res = mpn_error_mpi(dup.err, "MPI_Comm_idup of mpicomm");
  if (res != ncclSuccess) {
    free(made);
    return res;
  }
  res = mpn_chan_mpi_wait(&dup.req, mpn_chan_deadline(), abort);
  if (res != ncclSuccess) { /* (made stays: MPI may still write it) */
    MPN_WARN(
        "mpincclCommInitMPI: the duplication of the MPI communicator stays pending after this failure (MPI "
        "cannot cancel it); the communicator should not be used for further collectives");
    return res;
  }
  job->mpi_comm = *made;
  free(made);
  return ncclSuccess;
}

static ncclResult_t split_bootstrap(mpn_init_job_t* job, mpn_bootstrap_t** b, MPI_Comm* mpi);

/* Creates the bootstrap context of a job; for a split, also the MPI comm. */
static ncclResult_t job_bootstrap(mpn_init_job_t* job, mpn_bootstrap_t** b, MPI_Comm* mpi) {
  const volatile int* abort = job->comm ? &job->comm->abort_flag : NULL;
  switch (job->kind) {
    case MPN_INIT_RANK:
      if (abort && *abort) { /* aborted before it could join (setting the device takes long): its peers are told */
        ncclResult_t res =
            mpn_error_set(NULL, ncclRemoteError, "rank %d was aborted before it joined the rendezvous", job->rank);
        mpn_bootstrap_rendezvous_fail(&job->id, job->nranks, job->rank, res);
        return res;
      }
      return mpn_bootstrap_rendezvous(&job->id, job->nranks, job->rank, abort, b);
    case MPN_INIT_MPI: {
      MPN_CHECK(mpn_turn_wait(&job->mpi_turn, abort, "mpincclCommInitMPI"));
      ncclResult_t res = mpi_dup_make(job, abort);
      if (res == ncclSuccess) res = mpn_bootstrap_from_mpi(job->mpi_comm, abort, b);
      mpn_turn_end(&job->mpi_turn);
      if (res == ncclSuccess) { /* the communicator takes the duplicate */
        *mpi = job->mpi_comm;
        job->mpi_comm = MPI_COMM_NULL;
      }
      return res;
    }
    case MPN_INIT_SPLIT: break;
  }
  MPN_CHECK(mpn_turn_wait(&job->split_turn, abort, "ncclCommSplit"));
  ncclResult_t res = split_bootstrap(job, b, mpi);
  mpn_turn_end(&job->split_turn);
  return res;
}

typedef struct {
  MPI_Comm parent;
  int color, key;
  MPI_Comm *user, *mine; /* the split's, for mpincclCommGetMPIComm; the library's duplicate of it */
  int err;
  const char* what;
} mpi_split_t;

/* The duplicate is a collective of the new communicator's members only,
 * right after its creation: no program can use that communicator yet. */
static void mpi_split(void* arg) {
  mpi_split_t* s = arg;
  s->what = "MPI_Comm_split";
  s->err = MPI_Comm_split(s->parent, s->color, s->key, s->user);
  if (s->err != MPI_SUCCESS || *s->user == MPI_COMM_NULL) return;
  s->what = "MPI_Comm_dup";
  s->err = MPI_Comm_dup(*s->user, s->mine);
  if (s->err != MPI_SUCCESS) MPI_Comm_free(s->user);
}

/* The MPI_Comm_split of a split of an MPI-made communicator, in its turn.
 * Its waits watch abort, which the parent's abort sets (split_watch); a
 * split without a color watches the parent's own flag. */
static ncclResult_t split_mpi(mpn_init_job_t* job, const volatile int* abort, MPI_Comm* mpi) {
  const struct ncclComm* parent = job->parent;
  if (abort == NULL) abort = &parent->abort_flag;
  MPN_CHECK(mpn_turn_wait(&job->mpi_turn, abort, "ncclCommSplit"));
  mpi_split_t sp = {
      parent->mpi_comm, job->color < 0 ? MPI_UNDEFINED : job->color, job->key, &job->mpi_user, mpi, MPI_SUCCESS, NULL};
  int ran = mpn_chan_call(mpi_split, &sp, 1, abort);
  mpn_turn_end(&job->mpi_turn);
  if (ran == MPN_CHAN_NO_MEMORY) return ncclSystemError; /* its text is set */
  if (ran != 0)
    return mpn_error_set(NULL, *abort ? ncclRemoteError : ncclInvalidUsage,
                         "ncclCommSplit: %s before MPI_Comm_split of the parent's MPI communicator",
                         *abort ? "aborted" : "MPI was finalized");
  if (sp.err != MPI_SUCCESS) return mpn_error_mpi(sp.err, sp.what);
  return ncclSuccess;
}

/* Publishes the flag the running split's waits watch (NULL: none now) for
 * the parent's destroy or abort to set (mpn_init_split_abort), under the
 * lock of the parent's split order that it takes too: it either finds the
 * flag or is found here (1: the parent is ending; it sets abort_flag
 * before), and never sets a flag taken back (a failed split's child may
 * be freed at once). */
static int split_watch(struct ncclComm* parent, volatile int* flag) {
  mpn_order_lock(&parent->split_order);
  parent->split_abort = flag;
  int ending = parent->abort_flag;
  mpn_order_unlock(&parent->split_order);
  return ending;
}

void mpn_init_split_abort(struct ncclComm* parent) {
  mpn_order_lock(&parent->split_order);
  if (parent->split_abort) *parent->split_abort = 1;
  mpn_order_unlock(&parent->split_order);
}

static ncclResult_t split_bootstrap(mpn_init_job_t* job, mpn_bootstrap_t** b, MPI_Comm* mpi) {
  struct ncclComm* parent = job->parent;
  /* The split's waits, to the end of its MPI_Comm_split, watch the child's
   * flag (ncclCommAbort of the child ends them), which the parent's abort
   * sets too.  Splits queued behind this one look when their turn comes. */
  volatile int* child_abort = job->comm ? &job->comm->abort_flag : NULL;
  if (split_watch(parent, child_abort)) {
    (void)split_watch(parent, NULL);
    if (child_abort) *child_abort = 1;
    return mpn_error_set(NULL, ncclRemoteError, "ncclCommSplit: the parent communicator was aborted");
  }
  ncclResult_t res = mpn_bootstrap_split(parent->bootstrap, job->color, job->key, child_abort, b);
  /* A split of an MPI-made communicator keeps an MPI communicator (a
   * failed split's MPI turn passes at mpn_init_job_release). */
  if (res == ncclSuccess && parent->mpi_comm != MPI_COMM_NULL) {
    res = split_mpi(job, child_abort, mpi);
    if (res != ncclSuccess) { /* job_run keeps only what succeeded */
      mpn_bootstrap_fail(*b, res); /* the other members go on to the communicator's set-up */
      mpn_bootstrap_destroy(*b);
      *b = NULL;
    }
  }
  (void)split_watch(parent, NULL); /* before job_run's failure path, which may free the child */
  return res;
}

void mpn_init_job_release(mpn_init_job_t* job) {
  /* A job that never ran, or stopped before its turns came, lets them pass
   * without waiting for them (turn_give_up). */
  mpn_turn_pass(&job->split_turn);
  mpn_turn_pass(&job->mpi_turn);
  if (job->kind == MPN_INIT_SPLIT && job->parent) mpn_comm_release(job->parent);
  job->parent = NULL;
  if (job->kind == MPN_INIT_MPI && job->mpi_comm != MPI_COMM_NULL) /* a duplicate no communicator took */
    mpn_chan_comm_free(&job->mpi_comm);
}

static ncclResult_t job_run(mpn_init_job_t* job);

ncclResult_t mpn_init_job_run(mpn_init_job_t* job) {
  ncclResult_t res = job_run(job);
  job->result = res;
  mpn_init_job_release(job);
  return res;
}

/* A job run on the calling thread: a split sets its parent's device, and
 * the caller's current device is its own again afterwards, as NCCL leaves
 * it (device.h: library calls that touch another device than the caller's
 * leave the caller's as it was). */
static ncclResult_t job_run_here(mpn_init_job_t* job) {
  int saved = mpn_cuda_device_enter(-1);
  ncclResult_t res = mpn_init_job_run(job);
  mpn_cuda_device_leave(saved);
  return res;
}

/* Sets the job's device, then makes its bootstrap context.  A rank that
 * cannot set its device must not leave its peers waiting for it until
 * MPINCCL_BOOTSTRAP_TIMEOUT: a rendezvous's rank tells the rendezvous; a
 * rank of an MPI communicator or of a split has none to tell, so it takes
 * the bootstrap's first step with its peers (a split's MPI_Comm_split and
 * turns too) and leaves the new context at once: their next set-up
 * collective fails with ncclRemoteError saying why.  Returns the device's
 * failure, with its text, and *b and *mpi as made, for job_run to keep. */
static ncclResult_t job_join(mpn_init_job_t* job, mpn_bootstrap_t** b, MPI_Comm* mpi) {
  if (job->device < 0) return job_bootstrap(job, b, mpi);
  ncclResult_t res = mpn_cuda_set_device(job->device);
  if (res == ncclSuccess) {
    mpn_device_renew(job->device); /* (a program that reset the device: renew.h) */
    return job_bootstrap(job, b, mpi);
  }
  if (job->kind == MPN_INIT_RANK) {
    mpn_bootstrap_rendezvous_fail(&job->id, job->nranks, job->rank, res);
    return res;
  }
  char why[512];
  snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
  if (job_bootstrap(job, b, mpi) == ncclSuccess && *b) {
    mpn_error_set(NULL, res, "rank %d could not set its CUDA device: %s", (*b)->rank, why); /* the notice's reason */
    mpn_bootstrap_fail(*b, res);
  }
  mpn_error_set(NULL, res, "%s", why); /* the caller's: the device's, not the notice's nor a failed bootstrap's */
  return res;
}

static ncclResult_t job_run(mpn_init_job_t* job) {
  struct ncclComm* comm = job->comm;
  mpn_bootstrap_t* b = NULL;
  MPI_Comm mpi = MPI_COMM_NULL;
  ncclResult_t res = job_join(job, &b, &mpi);
  if (res == ncclSuccess && comm == NULL) return ncclSuccess; /* split without a color: done */
  if (b == NULL || comm == NULL) goto fail;                   /* (job_join made nothing to keep) */
  b->abort = &comm->abort_flag;
  comm->bootstrap = b;
  comm->rank = b->rank;
  comm->nranks = b->nranks;
  comm->mpi_comm = mpi;
  comm->mpi_user = job->mpi_user;
  comm->mpi_user_owned = job->kind == MPN_INIT_SPLIT;
  job->mpi_user = MPI_COMM_NULL;
  if (res != ncclSuccess) goto fail; /* (its device: job_join told its peers) */
  MPN_CHECK_GOTO(comm_setup(comm), res, fail);
  /* The kernels load now, not at their first launch, and only once the
   * communicator is set up (kernels.c); the barrier keeps every rank from
   * enqueuing work before all have loaded them.  The device's service stream
   * is made now too (cuda/service.h). */
  if (job->device >= 0) {
    mpn_cuda_kernels_load(job->device);
    mpn_cuda_service_make(job->device);
  }
  MPN_CHECK_GOTO(mpn_bootstrap_barrier(b), res, fail);
  MPN_INFO(MPN_SUBSYS_INIT, "comm %p rank %d nranks %d cudaDev %d ready", (void*)comm, comm->rank,
           comm->nranks, comm->cuda_dev);
  __atomic_store_n(&comm->state, MPN_COMM_READY, __ATOMIC_RELEASE);
  /* From ncclInProgress only: the watchdog may have found a peer gone
   * since the state said ready, and its ncclRemoteError stays. */
  int creating = ncclInProgress;
  __atomic_compare_exchange_n(&comm->async_error, &creating, (int)ncclSuccess, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return ncclSuccess;
fail:
  /* Peers waiting for this rank in a set-up collective stop at once. */
  if (b) mpn_bootstrap_fail(b, res);
  if (comm) {
    __atomic_store_n(&comm->state, MPN_COMM_FAILED, __ATOMIC_RELEASE);
    /* The reason copied where ncclGetLastError(comm) finds it from any
     * thread (a peer found gone first keeps its own). */
    mpn_comm_fail_async(comm, res, "%s", mpn_error_last(NULL));
  } else { /* no comm keeps the reason: the job does, for the calling thread */
    snprintf(job->error, sizeof(job->error), "%s", mpn_error_last(NULL));
  }
  return res;
}

/* A creation thread: a worker of the channel (below MPI_THREAD_MULTIPLE its
 * MPI work is done by the application's threads that wait for it). */
static void* job_main(void* arg) {
  mpn_init_job_t* job = arg;
  mpn_chan_worker_begin();
  ncclResult_t res = mpn_init_job_run(job);
  mpn_chan_worker_end();
  __atomic_store_n(&job->finished, 1, __ATOMIC_RELEASE);
  return (void*)(intptr_t)res;
}

/* A split without a color has no communicator to join it: it frees itself.
 * Its parent, held until the job's release, answers ncclInProgress to
 * ncclCommGetAsyncError until it is done (split_pending, taken by
 * jobs_background), then its failure, as NCCL's parent of a non-blocking
 * split does: nothing else could tell the caller. */
static void* job_main_detached(void* arg) {
  mpn_init_job_t* job = arg;
  struct ncclComm* parent = job->parent;
  mpn_chan_worker_begin();
  ncclResult_t res = job_run(job);
  job->result = res;
  if (res != ncclSuccess) mpn_comm_fail_async(parent, res, "%s", job->error);
  __atomic_sub_fetch(&parent->split_pending, 1, __ATOMIC_ACQ_REL);
  mpn_init_job_release(job);
  mpn_chan_worker_end();
  free(job);
  return NULL;
}

void mpn_init_job_wait(const mpn_init_job_t* job, int ending) {
  while (!__atomic_load_n(&job->finished, __ATOMIC_ACQUIRE)) {
    mpn_chan_drive(ending ? MPN_CHAN_DRIVE_END : MPN_CHAN_DRIVE_CREATE);
    usleep(50);
  }
}

/* Below MPI_THREAD_MULTIPLE a worker's MPI work waits for the application's
 * threads, and no communicator would be polled for a split without a color:
 * it runs on the calling thread, if its parent has no other rank in this
 * process (whose split, not issued yet, it would wait for). */
static int split_inline(const mpn_init_job_t* job) {
  return job->comm == NULL && mpn_chan_mpi_ready() && mpn_chan_mpi_thread_level() < MPI_THREAD_MULTIPLE &&
         job->parent->topo.n_same_process == 1;
}

/* A job whose thread could not start (err, from pthread_create): the
 * reason is its result, kept by its comm (or the job) and the calling
 * thread.  A rank of a unique id tells the rendezvous, whose other ranks
 * fail at once instead of at MPINCCL_BOOTSTRAP_TIMEOUT; a split or a
 * creation from an MPI communicator never joined its collective, which
 * the same call made again later still meets (as in a failed group,
 * group.c).  Returns the failure. */
static ncclResult_t job_not_started(mpn_init_job_t* job, int err) {
  ncclResult_t res = mpn_error_set(job->comm, ncclSystemError, "cannot start a creation thread: %s", strerror(err));
  if (job->comm == NULL) snprintf(job->error, sizeof(job->error), "%s", mpn_error_last(NULL));
  job->result = res;
  if (job->kind == MPN_INIT_RANK) mpn_bootstrap_rendezvous_fail(&job->id, job->nranks, job->rank, res);
  return res;
}

/* Non-blocking: each job on its own thread, joined by destroy. */
static ncclResult_t jobs_background(mpn_init_job_t* jobs) {
  ncclResult_t first = ncclSuccess;
  mpn_init_job_t *inline_jobs = NULL, **inline_tail = &inline_jobs; /* split_inline, in call order */
  for (mpn_init_job_t *job = jobs, *next; job; job = next) {
    next = job->next;
    if (split_inline(job)) {
      job->next = NULL;
      *inline_tail = job;
      inline_tail = &job->next;
      continue;
    }
    if (first == ncclSuccess) first = ncclInProgress;
    if (job->comm == NULL) __atomic_add_fetch(&job->parent->split_pending, 1, __ATOMIC_ACQ_REL);
    pthread_t t;
    int err = pthread_create(&t, NULL, job->comm ? job_main : job_main_detached, job);
    if (err != 0) {
      if (job->comm == NULL) __atomic_sub_fetch(&job->parent->split_pending, 1, __ATOMIC_ACQ_REL);
      ncclResult_t res = job_not_started(job, err);
      if (job->comm) {
        __atomic_store_n(&job->comm->state, MPN_COMM_FAILED, __ATOMIC_RELEASE);
        mpn_comm_fail_async(job->comm, res, "%s", mpn_error_last(NULL));
      }
      mpn_init_job_let_go(job, 0); /* (failed, but the caller's: destroy or abort it) */
      mpn_init_job_release(job);
      free(job);
      first = res;
    } else if (job->comm) {
      job->comm->init_thread = t;
      job->comm->job = job;
      /* last: a destroy or abort on another thread reads it first (comm.c, comm_join_init) */
      __atomic_store_n(&job->comm->init_thread_live, 1, __ATOMIC_RELEASE);
      mpn_comm_release(job->comm); /* a destroy or abort joins the thread from here on */
    } else {
      pthread_detach(t);
    }
  }
  /* After the others started: their peers may need them meanwhile. */
  for (mpn_init_job_t *job = inline_jobs, *next; job; job = next) {
    next = job->next;
    ncclResult_t res = job_run_here(job);
    free(job);
    if (res != ncclSuccess) first = res;
  }
  return first;
}

/* Runs n jobs on threads (they may rendezvous with each other) and joins them. */
static ncclResult_t jobs_threads(mpn_init_job_t* jobs, int n) {
  pthread_t* threads = calloc((size_t)n, sizeof(*threads));
  ncclResult_t first = ncclSuccess;
  int started = 0;
  for (mpn_init_job_t* job = jobs; job; job = job->next, started++) {
    int err = threads ? pthread_create(&threads[started], NULL, job_main, job) : ENOMEM;
    if (err != 0) {
      /* This job and those after it never run: their peers are told. */
      for (mpn_init_job_t* j = job; j; j = j->next) {
        ncclResult_t res = job_not_started(j, err);
        if (first == ncclSuccess) first = res;
      }
      /* Threads already started would wait for this rank: stop them. */
      for (mpn_init_job_t* j = jobs; j != job; j = j->next)
        if (j->comm) j->comm->abort_flag = 1;
      break;
    }
  }
  /* Below MPI_THREAD_MULTIPLE the jobs' MPI work is this thread's. */
  int k = 0;
  for (mpn_init_job_t* job = jobs; job && k < started; job = job->next, k++) mpn_init_job_wait(job, 0);
  for (int i = 0; i < started; i++) {
    void* ret = NULL;
    pthread_join(threads[i], &ret);
    if (first == ncclSuccess) first = (ncclResult_t)(intptr_t)ret;
  }
  free(threads);
  return first;
}

void mpn_init_job_let_go(mpn_init_job_t* job, int failed) {
  if (job->comm == NULL) return;
  if (!failed) {
    mpn_comm_release(job->comm);
    return;
  }
  int ours = !__atomic_exchange_n(&job->comm->closing, 1, __ATOMIC_ACQ_REL);
  mpn_comm_release(job->comm);
  if (ours) mpn_comm_free(job->comm); /* else the destroy or abort under way frees it */
  if (job->user_out) *job->user_out = NULL;
}

/* The job whose reason goes with the returned failure (first): the first
 * that failed so, as a thread that could not start, not the abort it
 * caused in the jobs before it; else the first that failed. */
static const mpn_init_job_t* job_to_report(const mpn_init_job_t* jobs, ncclResult_t first) {
  const mpn_init_job_t* failed = NULL;
  for (const mpn_init_job_t* job = jobs; job && first != ncclSuccess; job = job->next) {
    if (job->result == first) return job;
    if (failed == NULL && job->result != ncclSuccess) failed = job;
  }
  return failed;
}

/* Blocking: one job inline, several on threads; failed comms are freed
 * (mpn_init_job_let_go: a destroy or abort of another thread may have
 * taken that).  Failed by the creation's own result, not by the comm's
 * asynchronous error: a peer the watchdog finds gone once the creation
 * succeeded leaves the comm to the caller, who learns it through
 * ncclCommGetAsyncError (freed here, its handle went back to NULL while
 * the call returned ncclSuccess). */
static ncclResult_t jobs_blocking(mpn_init_job_t* jobs, int n) {
  ncclResult_t first = n == 1 ? job_run_here(jobs) : jobs_threads(jobs, n);
  const mpn_init_job_t* why = job_to_report(jobs, first);
  for (mpn_init_job_t *job = jobs, *next; job; job = next) {
    next = job->next;
    ncclResult_t res = job->result; /* (ncclInProgress: its thread did not start) */
    /* Bring the reason to the calling thread (a job's thread set it on its
     * own) before the comm goes away. */
    if (job == why) mpn_error_set(NULL, res, "%s", job->comm ? mpn_error_last(job->comm) : job->error);
    mpn_init_job_let_go(job, res != ncclSuccess);
    mpn_init_job_release(job); /* a job whose thread did not start never ran */
    free(job);
  }
  return first;
}

static pthread_mutex_t preload_lock = PTHREAD_MUTEX_INITIALIZER;

int mpn_init_jobs_mixed(const mpn_init_job_t* jobs) {
  int seen[2] = {0, 0};
  for (const mpn_init_job_t* job = jobs; job; job = job->next) seen[job->blocking != 0] = 1;
  return seen[0] && seen[1];
}

ncclResult_t mpn_init_jobs_launch(mpn_init_job_t* jobs) {
  int n = 0, background = 0;
  for (mpn_init_job_t* job = jobs; job; job = job->next, n++) background |= !job->blocking;
  /* Creation threads must not read the environment (see channel_life.c), nor
   * start what writes it: both here, on the calling thread, before any
   * starts; and one calling thread at a time (threads creating one rank
   * each call this at once: one's driver start, which sets variables, must
   * not meet another's first reads of the environment). */
  pthread_mutex_lock(&preload_lock);
  mpn_log_init();
  (void)mpn_params_load();
  (void)mpn_chan_launcher_rank();
  mpn_transport_preload();
  /* The CUDA driver sets environment variables while it starts: start it
   * here (test_comm_local crashed in getenv on the GPU machine otherwise),
   * with the current device's context (it crashed once more, rarely, after
   * the driver alone was started here, and again in the tenth session
   * with the context started).  hwloc reads the environment while it loads
   * the topology, and its components may start GPU libraries: load it here
   * too, once per process. */
  if (mpn_cuda_device_count() > 0) {
    for (mpn_init_job_t* job = jobs; job; job = job->next)
      if (job->device >= 0) mpn_cuda_context_start(job->device);
    mpn_numa_preload(); /* the GPUs' NUMA nodes come from hwloc (topo.c) */
  }
  pthread_mutex_unlock(&preload_lock);
  /* MPI started by the application: the channel takes it up here, on the
   * application's thread (below MPI_THREAD_MULTIPLE creation threads never
   * call MPI). */
  int inited = 0, finalized = 0, needs_mpi = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  for (const mpn_init_job_t* job = jobs; job && !inited; job = job->next)
    needs_mpi |= job->kind == MPN_INIT_RANK && (job->id.flags & MPN_BOOTSTRAP_ID_MPI);
  /* A failure is the jobs' to report.  MPI started here, if the jobs need it
   * (an id made before MPI_Init): MPI's main thread is then this one. */
  if (!finalized && (inited || needs_mpi)) (void)mpn_chan_mpi_start(!inited);
  return background ? jobs_background(jobs) : jobs_blocking(jobs, n);
}

/* Allocates the communicator and its job; the job's kind fields are the caller's. */
static ncclResult_t job_new(mpn_init_kind_t kind, const mpn_config_t* cfg, int device,
                            ncclComm_t* user_out, mpn_init_job_t** out) {
  mpn_init_job_t* job = calloc(1, sizeof(*job));
  if (job == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  job->kind = kind;
  job->result = ncclInProgress; /* until it ran */
  job->device = device;
  job->blocking = cfg->blocking;
  job->user_out = user_out;
  job->mpi_comm = job->mpi_user = MPI_COMM_NULL;
  if (user_out) {
    ncclResult_t res = mpn_comm_alloc(cfg, device, &job->comm);
    if (res != ncclSuccess) {
      free(job);
      return res;
    }
  }
  *out = job;
  return ncclSuccess;
}

/* Hands a new job to the group machinery and publishes the handle.  From
 * here on another thread may destroy or abort the comm: it is held until
 * its creation is done with it (blocking), or its thread is known to
 * destroy and abort (non-blocking), so that such a call stops the creation
 * (abort_flag) and frees the comm only after (launches_wait):
 * mpn_init_job_let_go. */
static ncclResult_t job_submit(mpn_init_job_t* job) {
  log_version_once();
  if (job->comm) (void)mpn_comm_hold(job->comm); /* (live: made by job_new) */
  if (job->user_out) *job->user_out = job->comm;
  return mpn_group_add_job(job);
}

MPN_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (uniqueId == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  mpn_bootstrap_id_t id;
  MPN_CHECK(mpn_bootstrap_id_create(&id));
  memset(uniqueId, 0, sizeof(*uniqueId));
  memcpy(uniqueId->internal, &id, sizeof(id));
  return ncclSuccess;
}

static ncclResult_t init_rank(ncclComm_t* newcomm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config,
                              const char* fn) {
  MPN_CHECK(mpn_params_load());
  if (nranks < 1) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: nranks %d is not positive", fn, nranks);
  if (nranks > MPN_MAX_RANKS) /* the rendezvous's messages would outgrow their 32-bit length */
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: nranks %d above the most this version supports (%d)", fn, nranks,
                      MPN_MAX_RANKS);
  if (rank < 0 || rank >= nranks)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: rank %d out of range [0, %d)", fn, rank, nranks);
  mpn_bootstrap_id_t id;
  memcpy(&id, commId.internal, sizeof(id));
  if (id.magic != MPN_BOOTSTRAP_ID_MAGIC)
    return MPN_REFUSE(NULL, ncclInvalidArgument,
                      "%s: commId was not made by ncclGetUniqueId (or was not broadcast to this "
                      "rank)", fn);
  mpn_config_t cfg;
  mpn_init_job_t* job;
  ncclResult_t res = newcomm == NULL ? MPN_REFUSE(NULL, ncclInvalidArgument, "%s: newcomm is NULL", fn)
                                     : mpn_config_read(config, NULL, fn, &cfg);
  if (res == ncclSuccess) res = job_new(MPN_INIT_RANK, &cfg, mpn_cuda_current_device(), newcomm, &job);
  if (res != ncclSuccess) { /* the other ranks would wait for this one at the rendezvous */
    mpn_bootstrap_rendezvous_fail(&id, nranks, rank, res);
    return res;
  }
  job->id = id;
  job->nranks = job->comm->nranks = nranks;
  job->rank = job->comm->rank = rank;
  return job_submit(job);
}

MPN_API(ncclResult_t, ncclCommInitRank, ncclComm_t* newcomm, int nranks, ncclUniqueId commId,
        int rank) {
  return mpn_group_fail(init_rank(newcomm, nranks, commId, rank, NULL, "ncclCommInitRank"));
}

MPN_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* newcomm, int nranks,
        ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return mpn_group_fail(init_rank(newcomm, nranks, commId, rank, config, "ncclCommInitRankConfig"));
}

static ncclResult_t init_all(ncclComm_t* comms, int ndev, const int* devlist) {
  const char* fn = "ncclCommInitAll";
  if (comms == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: comms is NULL", fn);
  /* As NCCL's: a negative count is refused, none at all creates nothing and succeeds. */
  if (ndev < 0) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: ndev %d is negative", fn, ndev);
  if (ndev == 0) return ncclSuccess;
  MPN_CHECK(mpn_params_load());
  int count = mpn_cuda_device_count();
  for (int i = 0; i < ndev; i++) {
    int dev = devlist ? devlist[i] : i;
    if (dev < 0 || dev >= count)
      return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: %s[%d] = %d is not a CUDA device [0, %d)",
                        fn, devlist ? "devlist" : "device", i, dev, count);
  }
  mpn_bootstrap_id_t id;
  mpn_bootstrap_id_create_local(&id);
  ncclUniqueId uid;
  memset(&uid, 0, sizeof(uid));
  memcpy(uid.internal, &id, sizeof(id));
  /* At the nesting limit the group start is refused and opens nothing: the
   * group end below would then close the caller's group. */
  ncclResult_t res = pncclGroupStart();
  if (res != ncclSuccess) return res;
  int saved = mpn_cuda_current_device();
  for (int i = 0; i < ndev && res == ncclSuccess; i++) {
    res = mpn_cuda_set_device(devlist ? devlist[i] : i);
    if (res == ncclSuccess) res = init_rank(&comms[i], ndev, uid, i, NULL, fn);
    if (res != ncclSuccess) mpn_group_fail(res);
  }
  ncclResult_t end = pncclGroupEnd();
  if (saved >= 0) mpn_cuda_set_device(saved);
  return res != ncclSuccess ? res : end;
}

MPN_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  return mpn_group_fail(init_all(comms, ndev, devlist));
}

static ncclResult_t init_mpi(ncclComm_t* comm, MPI_Comm mpicomm, ncclConfig_t* config) {
  const char* fn = "mpincclCommInitMPI";
  if (comm == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
  if (mpicomm == MPI_COMM_NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: mpicomm is MPI_COMM_NULL", fn);
  MPN_CHECK(mpn_params_load());
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized)
    return MPN_REFUSE(NULL, ncclInvalidUsage, "%s: MPI is %s", fn, inited ? "finalized" : "not initialized");
  mpn_config_t cfg;
  MPN_CHECK(mpn_config_read(config, NULL, fn, &cfg));
  MPN_CHECK(mpn_chan_mpi_start(0));
  mpn_init_job_t* job;
  MPN_CHECK(job_new(MPN_INIT_MPI, &cfg, mpn_cuda_current_device(), comm, &job));
  job->mpi_user = mpicomm; /* (duplicated in the set-up: mpi_dup_make) */
  mpn_turn_take(mpi_order(), &job->mpi_turn);
  return job_submit(job);
}

ncclResult_t mpincclCommInitMPI(ncclComm_t* comm, MPI_Comm mpicomm, ncclConfig_t* config) MPN_EXPORT;
ncclResult_t mpincclCommInitMPI(ncclComm_t* comm, MPI_Comm mpicomm, ncclConfig_t* config) {
  return mpn_group_fail(init_mpi(comm, mpicomm, config));
}

static ncclResult_t split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                          ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  MPN_CHECK(mpn_comm_check(comm, fn, 1));
  if (newcomm == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: newcomm is NULL", fn);
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: color %d is negative and not NCCL_SPLIT_NOCOLOR", fn, color);
  /* The jobs of a group run at once: two splits would share comm's set-up;
   * and a window call queued before would hold an earlier turn than the
   * split, which the group runs first (core/turn.h). */
  if (mpn_group_has_job_of(comm))
    return MPN_REFUSE(comm, ncclInvalidUsage,
                      "%s: comm %p is split, or given a window call, already in this group; split it after "
                      "ncclGroupEnd",
                      fn, (void*)comm);
  mpn_config_t cfg;
  MPN_CHECK(mpn_config_read(config, &comm->config, fn, &cfg));
  mpn_init_job_t* job;
  int has_color = color != NCCL_SPLIT_NOCOLOR;
  MPN_CHECK(job_new(MPN_INIT_SPLIT, &cfg, comm->cuda_dev, has_color ? newcomm : NULL, &job));
  ncclResult_t held = mpn_comm_hold_for(comm, fn);
  if (held != ncclSuccess) { /* destroyed by another thread meanwhile */
    if (job->comm) mpn_comm_free(job->comm);
    free(job);
    return held;
  }
  job->parent = comm; /* held until the job ran (mpn_init_job_release) */
  job->color = color;
  job->key = key;
  mpn_turn_take(&comm->split_order, &job->split_turn);
  if (comm->mpi_comm != MPI_COMM_NULL) mpn_turn_take(mpi_order(), &job->mpi_turn);
  if (!has_color) *newcomm = NULL;
  return job_submit(job);
}

MPN_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
        ncclConfig_t* config) {
  return mpn_group_fail(split(comm, color, key, newcomm, config));
}
