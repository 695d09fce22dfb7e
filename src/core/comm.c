/*
 * comm.c - communicator life cycle (finalize, destroy, abort), queries, and
 * the registry of live handles, so that a destroyed handle is refused with a
 * message instead of being dereferenced.
 */
#include "core/comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/alias.h"
#include "core/api.h"
#include "core/clock.h"
#include "core/drain.h"
#include "core/error.h"
#include "core/group.h"
#include "core/param.h"
#include "cuda/ipc_closer.h"
#include "p2p/p2p.h"
#include "rma/rma.h"
#include "rma/winasync.h"
#ifdef HAVE_UCX
#include "ucx/net.h"
#include "ucx/staged.h"
#include "ucx/winstage.h"
#endif
#include "transport.h"

/* Live communicators: a small open set, scanned linearly (few per process). */
static struct ncclComm** live;
static int n_live, cap_live;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t last_serial; /* under live_lock */

/* For the closing thread (cuda/ipc_closer.h): quiet when every live
 * communicator's streams have passed their last launch's mark.  (Work of
 * a CUDA graph is not counted: it is its launcher's.) */
static int comms_quiet(void) {
  struct ncclComm** comms = NULL;
  int n = mpn_comm_hold_live(&comms), quiet = 1;
  for (int i = 0; i < n; i++) {
    quiet = quiet && mpn_drain_done(comms[i]);
    mpn_comm_release(comms[i]);
  }
  free(comms);
  return quiet;
}

static ncclResult_t registry_add(struct ncclComm* comm) {
  mpn_ipc_closer_set_quiet(comms_quiet);
  pthread_mutex_lock(&live_lock);
  if (n_live == cap_live) {
    int cap = cap_live ? 2 * cap_live : 16;
    struct ncclComm** grown = realloc(live, (size_t)cap * sizeof(*live));
    if (grown == NULL) {
      pthread_mutex_unlock(&live_lock);
      return mpn_error_set(NULL, ncclSystemError, "out of memory");
    }
    live = grown;
    cap_live = cap;
  }
  live[n_live++] = comm;
  comm->serial = ++last_serial;
  pthread_mutex_unlock(&live_lock);
  return ncclSuccess;
}

/* Returns how many communicators are left. */
static int registry_remove(struct ncclComm* comm) {
  pthread_mutex_lock(&live_lock);
  for (int i = 0; i < n_live; i++)
    if (live[i] == comm) {
      live[i] = live[--n_live];
      break;
    }
  int left = n_live;
  pthread_mutex_unlock(&live_lock);
  return left;
}

/* Under live_lock: a launch (or the watchdog) holds comm (mpn_comm_hold). */
static void hold_locked(struct ncclComm* comm) { __atomic_add_fetch(&comm->launches, 1, __ATOMIC_ACQ_REL); }

int mpn_comm_hold_live(struct ncclComm*** out) {
  pthread_mutex_lock(&live_lock);
  struct ncclComm** all = n_live ? malloc((size_t)n_live * sizeof(*all)) : NULL;
  int n = all ? n_live : 0;
  for (int i = 0; i < n; i++) {
    all[i] = live[i];
    hold_locked(all[i]);
  }
  pthread_mutex_unlock(&live_lock);
  *out = all;
  return n;
}

int mpn_comm_hold(struct ncclComm* comm) { return mpn_comm_hold_serial(comm, 0); }

ncclResult_t mpn_comm_hold_for(struct ncclComm* comm, const char* caller) {
  if (mpn_comm_hold(comm)) return ncclSuccess;
  return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: comm %p is not a live communicator", caller, (void*)comm);
}

void mpn_comm_registry_lock(void) { pthread_mutex_lock(&live_lock); }

void mpn_comm_registry_unlock(void) { pthread_mutex_unlock(&live_lock); }

int mpn_comm_hold_serial_locked(struct ncclComm* comm, uint64_t serial) {
  int found = 0;
  for (int i = 0; i < n_live && !found; i++) found = live[i] == comm && (serial == 0 || comm->serial == serial);
  if (found) hold_locked(comm);
  return found;
}

int mpn_comm_hold_serial(struct ncclComm* comm, uint64_t serial) {
  pthread_mutex_lock(&live_lock);
  int found = mpn_comm_hold_serial_locked(comm, serial);
  pthread_mutex_unlock(&live_lock);
  return found;
}

void mpn_comm_release(struct ncclComm* comm) { __atomic_sub_fetch(&comm->launches, 1, __ATOMIC_ACQ_REL); }

int mpn_comm_is_live(const struct ncclComm* comm) {
  int found = 0;
  pthread_mutex_lock(&live_lock);
  for (int i = 0; i < n_live && !found; i++) found = live[i] == comm;
  pthread_mutex_unlock(&live_lock);
  return found;
}

ncclResult_t mpn_comm_alloc(const mpn_config_t* config, int device, struct ncclComm** out) {
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  if (comm == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  comm->magic = MPN_COMM_MAGIC;
  comm->config = *config;
  comm->cuda_dev = device;
  comm->rank = comm->nranks = -1;
  comm->mpi_comm = comm->mpi_user = MPI_COMM_NULL;
  comm->state = MPN_COMM_INITIALIZING;
  comm->async_error = ncclInProgress;
  pthread_mutex_init(&comm->error_lock, NULL);
  ncclResult_t res = registry_add(comm);
  if (res != ncclSuccess) {
    free(comm);
    return res;
  }
  *out = comm;
  return ncclSuccess;
}

/* Waits for a background creation to end (after asking it to stop if abort). */
static void comm_join_init(struct ncclComm* comm, int abort) {
  if (abort) comm->abort_flag = 1;
  /* Its thread and job are published before init_thread_live (init.c,
   * jobs_background), which may be read here while the creating thread
   * publishes them: nothing of them is touched before it reads 1.  Not yet
   * published, they are joined by comm_quiesce's second call, which comes
   * after the creating thread let go of comm. */
  if (__atomic_load_n(&comm->init_thread_live, __ATOMIC_ACQUIRE)) {
    mpn_init_job_wait(comm->job, 1);
    pthread_join(comm->init_thread, NULL);
    comm->init_thread_live = 0;
    free(comm->job);
    comm->job = NULL;
  }
}

/* Until no group launch of another thread, nor split of comm, holds comm
 * (mpn_comm_hold).  Below MPI_THREAD_MULTIPLE a split's MPI work may wait
 * for this thread (a destroy on the main thread right after a non-blocking
 * split waited for good): done here as comm_join_init does. */
static void launches_wait(const struct ncclComm* comm) {
  while (__atomic_load_n(&comm->launches, __ATOMIC_ACQUIRE) > 0) {
    mpn_chan_drive(MPN_CHAN_DRIVE_END);
    usleep(50);
  }
}

/* How long the end of the last communicator waits for its closes. */
#define CLOSES_AT_END_MS 1000

/* Before anything is freed: no thread of the process still uses comm, and
 * (abort) no stream waits any more for peers that will never write. */
static void comm_quiesce(struct ncclComm* comm, int abort) {
  /* First, by plain stores: the flag kernels' waits on this rank's pairs
   * (and its peers') let go (cuda/sync.h, escape), so that a thread of the
   * process blocked in a launch behind them, which the waits below wait
   * for, and every CUDA call the process makes meanwhile, can go on. */
  if (abort) mpn_p2p_mark_aborted(comm, -1);
  comm_join_init(comm, 1);
  /* A split of comm in progress watches its child's flag, not comm's. */
  mpn_init_split_abort(comm);
  /* A launch of another thread still using comm (waiting for peers, say)
   * sees abort_flag and ends: only then go.  So does a creation whose
   * handle was set before it started (init.c, job_submit); a non-blocking
   * one has its thread by then (published before it let go of comm),
   * joined here. */
  launches_wait(comm);
  comm_join_init(comm, 1);
  /* Streams may wait for peers that will never write (a stuck or failed
   * exchange is why programs abort): released before anything is freed. */
  if (abort) {
    mpn_p2p_abort(comm);
#ifdef HAVE_UCX
    /* Replays of captured graphs queued behind the abort post nothing more
     * (their host nodes would connect and post again after the close), from
     * before the close on: a send/receive group's replay then finds its
     * words as the last one left them, and passes; a one-sided wait puts
     * its word back after it, so the drain releases those again
     * (ucx_release_waits). */
    mpn_ucx_staged_kill_graphs(comm);
    mpn_ucx_rma_kill_graphs(comm);
    /* Before anything that synchronizes the device (freeing device memory):
     * tells the UCX peers and drops what the proxy holds of comm, which
     * lets the lanes go; the counters of one-sided signals too. */
    mpn_ucx_abort(comm);
    mpn_ucx_staged_release(comm);
    mpn_ucx_rma_release(comm);
#endif
  }
}

#ifdef HAVE_UCX
/* The abort drain's rounds (p2p.h): the one-sided waits over UCX again. */
static void ucx_release_waits(struct ncclComm* comm) { mpn_ucx_rma_release(comm); }
#endif

/* The pairs, windows, drain and aliases of comm's device; gone: its device
 * was reset while it lived. */
static void comm_free_device(struct ncclComm* comm, int abort, int gone) {
  /* Queued graph replays each take one release (p2p.h): again until the
   * device is idle, or the pairs stay mapped rather than wait. */
  if (!gone) {
    void (*release_more)(struct ncclComm*) = NULL;
#ifdef HAVE_UCX
    if (comm->ucx_rma_graphs) release_more = ucx_release_waits; /* captured one-sided calls over UCX */
#endif
    int idle = abort ? mpn_p2p_abort_drain(comm, release_more) : 1;
    if (!abort) { /* a normal end, its streams done: the peers' watchdogs can tell it from a failure */
      mpn_rma_mark_left(comm);
      mpn_p2p_mark_left(comm);
    }
    mpn_rma_free(comm, !idle);
    mpn_p2p_free(comm, !idle);
  } else {
    /* Its device was reset while it lived (core/renew.h): the handles of
     * its streams, events and memory may name new objects now, so its
     * device state is left as it is, not freed nor given back. */
    MPN_INFO(MPN_SUBSYS_INIT, "rank %d: its device was reset while it lived: its device state is left", comm->rank);
  }
  mpn_drain_free(comm);
  if (!gone) mpn_alias_free(comm);
}

#ifdef HAVE_UCX
/* comm's state with peers over UCX. */
static void comm_free_ucx(struct ncclComm* comm, int gone) {
  /* The host nodes of captured graphs read comm->ucx and post for comm: a
   * replay still queued finds them dead from here on, before that state
   * goes (a clean destroy waited for the replays under way first:
   * mpn_ucx_staged_quiesce). */
  mpn_ucx_staged_kill_graphs(comm);
  mpn_ucx_rma_kill_graphs(comm);
  /* Done cleanly: the one-sided keys go while their endpoints live.  Else
   * the proxy first cancels what it still holds of comm, and what peers or
   * streams may still use is leaked. */
  int leak = !comm->ucx_clean || gone || /* (a reset device's pinned memory went with it) */
             !mpn_ucx_rma_quiesce(comm);
  if (!leak) mpn_ucx_rma_free(comm, 0);
  mpn_ucx_comm_free(comm);
  if (leak) mpn_ucx_rma_free(comm, 1);
  mpn_ucx_rma_free_graphs(comm, leak);
  if (!gone) mpn_ucx_staged_free(comm); /* (its lanes' streams and events died with the context) */
}
#endif

/* Frees comm; with abort (ncclCommAbort) it first lets go of what the
 * streams wait for and tells the peers (mpn_p2p_abort). */
static void comm_free(struct ncclComm* comm, int abort) {
  if (comm == NULL) return;
  int last = registry_remove(comm) == 0;
  comm_quiesce(comm, abort);
  int gone = __atomic_load_n(&comm->device_gone, __ATOMIC_ACQUIRE);
  comm_free_device(comm, abort, gone);
#ifdef HAVE_UCX
  comm_free_ucx(comm, gone);
#endif
  mpn_comm_free_registrations(comm);
  if (comm->bootstrap) mpn_bootstrap_destroy(comm->bootstrap);
  mpn_topo_free(&comm->topo);
  free(comm->transport);
  free(comm->peer_gone);
  if (comm->mpi_comm != MPI_COMM_NULL) mpn_chan_comm_free(&comm->mpi_comm);
  if (comm->mpi_user_owned && comm->mpi_user != MPI_COMM_NULL) mpn_chan_comm_free(&comm->mpi_user);
  pthread_mutex_destroy(&comm->error_lock);
  comm->magic = 0;
  free(comm);
  /* The process's last communicator: its imports' closes, queued on the
   * closing thread, run now (none waits for a launch any more), so that a
   * program that resets the device next does not meet one under way
   * (CUDA leaves that to the caller, who cannot see this thread).  A close
   * waits for the process's GPU work on its own GPU: bounded. */
  if (last && !mpn_ipc_closer_drain_for(CLOSES_AT_END_MS))
    MPN_INFO(MPN_SUBSYS_IPC, "%d closes of IPC imports still queued %d ms after the last communicator went",
             mpn_ipc_closer_pending(), CLOSES_AT_END_MS);
}

void mpn_comm_free(struct ncclComm* comm) { comm_free(comm, 0); }

/* With comm's error lock held, which every failure report takes, so that
 * only a creation's end (ncclInProgress to ncclSuccess, init.c) moves the
 * code meanwhile: whether code becomes comm's asynchronous failure, none
 * being there; its text is recorded first, so that a poller that finds the
 * code (acquire) finds the text under the lock. */
static int async_take_locked(struct ncclComm* comm, ncclResult_t code, const char* text) {
  int cur = __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
  if (cur != ncclSuccess && cur != ncclInProgress) return 0;
  mpn_error_record_locked(comm, text);
  while ((cur == ncclSuccess || cur == ncclInProgress) &&
         !__atomic_compare_exchange_n(&comm->async_error, &cur, (int)code, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
  return 1;
}

/* A failure report (mpn_comm_fail_async; breaks: mpn_comm_set_broken). */
static int comm_fail(struct ncclComm* comm, ncclResult_t code, int breaks, const char* fmt, va_list ap) {
  char text[sizeof(comm->error_text)];
  vsnprintf(text, sizeof(text), fmt, ap);
  pthread_mutex_lock(&comm->error_lock);
  int kept = async_take_locked(comm, code, text);
  if (breaks && __atomic_load_n(&comm->broken, __ATOMIC_RELAXED) == ncclSuccess) {
    snprintf(comm->failed_text, sizeof(comm->failed_text), "%s", text);
    __atomic_store_n(&comm->broken, (int)code, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&comm->error_lock);
  if (kept)
    MPN_INFO(MPN_SUBSYS_ALL, "%s: %s", ncclGetErrorString(code), text);
  else
    MPN_INFO(MPN_SUBSYS_ALL, "%s: %s (comm %p reports its earlier failure, %s)", ncclGetErrorString(code), text,
             (void*)comm, ncclGetErrorString(mpn_comm_async(comm)));
  return kept;
}

int mpn_comm_fail_async(struct ncclComm* comm, ncclResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int kept = comm_fail(comm, code, 0, fmt, ap);
  va_end(ap);
  return kept;
}

/* A data call on comm after a peer was found gone or aborted: refused, as
 * NCCL refuses one on a communicator with an asynchronous error.  Flags
 * shared with that peer are released, so the call would complete and move
 * nothing. */
void mpn_comm_set_broken(struct ncclComm* comm, ncclResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  (void)comm_fail(comm, code, 1, fmt, ap);
  va_end(ap);
}

static ncclResult_t refuse_failed(struct ncclComm* comm, const char* caller, ncclResult_t code) {
  char why[sizeof(comm->failed_text)];
  pthread_mutex_lock(&comm->error_lock);
  memcpy(why, comm->failed_text, sizeof(why));
  pthread_mutex_unlock(&comm->error_lock);
  return MPN_REFUSE(comm, code, "%s: comm %p has failed (%s: %s); abort it (ncclCommAbort)", caller, (void*)comm,
                    ncclGetErrorString(code), why);
}

ncclResult_t mpn_comm_check(struct ncclComm* comm, const char* caller, int need) {
  if (comm == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: comm is NULL", caller);
  if (!mpn_comm_is_live(comm))
    return MPN_REFUSE(NULL, ncclInvalidArgument,
                      "%s: comm %p is not a live communicator (destroyed, or never created)",
                      caller, (void*)comm);
  if (need == MPN_COMM_NEED_LIVE) return ncclSuccess;
  int state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  /* As NCCL answers a communicator not ready: ncclInvalidArgument while it
   * is being made, its creation's own error once that failed. */
  if (state == MPN_COMM_INITIALIZING)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: comm %p is still being created; wait until ncclCommGetAsyncError "
                      "returns ncclSuccess",
                      caller, (void*)comm);
  if (state == MPN_COMM_FAILED) {
    ncclResult_t async = mpn_comm_async(comm);
    return MPN_REFUSE(comm, async == ncclSuccess || async == ncclInProgress ? ncclInvalidUsage : async,
                      "%s: comm %p failed during creation (%s)", caller, (void*)comm, ncclGetErrorString(async));
  }
  if (state == MPN_COMM_FINALIZED && need != MPN_COMM_NEED_QUERY)
    return MPN_REFUSE(comm, ncclInvalidUsage, "%s: comm %p was finalized", caller, (void*)comm);
  if (comm->abort_flag)
    return MPN_REFUSE(comm, ncclInvalidUsage, "%s: comm %p was aborted", caller, (void*)comm);
  ncclResult_t broken = (ncclResult_t)__atomic_load_n(&comm->broken, __ATOMIC_ACQUIRE);
  if (need == MPN_COMM_NEED_HEALTHY && broken != ncclSuccess) return refuse_failed(comm, caller, broken);
  return ncclSuccess;
}

/* A query's communicator held (an abort of another thread frees it only
 * after), then checked for need (MPN_COMM_NEED_*); its output pointer given
 * (out_ok, named out).  Released on failure. */
static ncclResult_t query_hold(struct ncclComm* comm, const char* caller, int need, int out_ok, const char* out) {
  if (comm == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: comm is NULL", caller);
  if (!mpn_comm_hold(comm))
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: comm %p is not a live communicator (destroyed, or never created)",
                      caller, (void*)comm);
  ncclResult_t res = mpn_comm_check(comm, caller, need);
  if (res == ncclSuccess && !out_ok) res = MPN_REFUSE(comm, ncclInvalidArgument, "%s: %s is NULL", caller, out);
  if (res != ncclSuccess) mpn_comm_release(comm);
  return res;
}

MPN_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  MPN_CHECK(query_hold(comm, "ncclCommCount", MPN_COMM_NEED_QUERY, count != NULL, "count"));
  *count = comm->nranks;
  mpn_comm_release(comm);
  return ncclSuccess;
}

MPN_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  MPN_CHECK(query_hold(comm, "ncclCommUserRank", MPN_COMM_NEED_QUERY, rank != NULL, "rank"));
  *rank = comm->rank;
  mpn_comm_release(comm);
  return ncclSuccess;
}

MPN_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  MPN_CHECK(query_hold(comm, "ncclCommCuDevice", MPN_COMM_NEED_QUERY, device != NULL, "device"));
  *device = comm->cuda_dev;
  mpn_comm_release(comm);
  return ncclSuccess;
}

/* comm's asynchronous error after asking the peers' reports (created
 * communicators only); ncclSuccess if none. */
static ncclResult_t comm_failed(struct ncclComm* comm) {
  int state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  if (state == MPN_COMM_READY || state == MPN_COMM_FINALIZED) {
    mpn_p2p_poll_errors(comm);
#ifdef HAVE_UCX
    mpn_ucx_poll_errors(comm);
    mpn_ucx_rma_poll_errors(comm);
#endif
  }
  ncclResult_t res = mpn_comm_async(comm);
  return res == ncclInProgress ? ncclSuccess : res;
}

static ncclResult_t get_async_error(struct ncclComm* comm, ncclResult_t* asyncError);

MPN_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  /* Held first: a thread may poll while another aborts, which frees comm
   * only once the poll let go of it.  Any live communicator: one still
   * being created, or whose creation failed, answers too. */
  MPN_CHECK(query_hold(comm, "ncclCommGetAsyncError", MPN_COMM_NEED_LIVE, asyncError != NULL, "asyncError"));
  ncclResult_t res = get_async_error(comm, asyncError);
  mpn_comm_release(comm);
  return res;
}

static ncclResult_t get_async_error(struct ncclComm* comm, ncclResult_t* asyncError) {
  mpn_chan_drive(MPN_CHAN_DRIVE_POLL); /* creations below MPI_THREAD_MULTIPLE progress while polled */
  int state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  (void)comm_failed(comm);
  ncclResult_t res = mpn_comm_async(comm);
  /* A window call, or a split without a color, under way. */
  if (res == ncclSuccess && (mpn_win_async_pending(comm) || __atomic_load_n(&comm->split_pending, __ATOMIC_ACQUIRE)))
    res = ncclInProgress;
  /* A finalize that has not returned ncclSuccess yet (non-blocking), for at
   * most MPINCCL_FINALIZE_TIMEOUT seconds if set. */
  if (res == ncclSuccess && state == MPN_COMM_FINALIZED && !mpn_drain_done(comm)) {
    long long limit = mpn_param_int(MPN_PARAM_FINALIZE_TIMEOUT);
    res = ncclInProgress;
    if (limit > 0 && comm->finalized_ns && mpn_clock_now_ns() - comm->finalized_ns > (uint64_t)limit * 1000000000ull)
      res = MPN_REFUSE(comm, ncclTimeout,
                       "ncclCommFinalize: rank %d's operations were not done after MPINCCL_FINALIZE_TIMEOUT=%lld s",
                       comm->rank, limit);
  }
  *asyncError = res;
  return ncclSuccess;
}

/* A communicator that the caller's open group makes, splits or registers a
 * window of cannot go before ncclGroupEnd runs that job. */
static ncclResult_t check_not_in_group(struct ncclComm* comm, const char* caller) {
  if (!mpn_group_has_job_of(comm)) return ncclSuccess;
  return MPN_REFUSE(NULL, ncclInvalidUsage,
                    "%s: comm %p is being created, split or given a window in this thread's open group; call "
                    "ncclGroupEnd first",
                    caller, (void*)comm);
}

/* Closes comm to new work and waits until the streams have run what it
 * enqueued (drain.h); non-blocking, ncclInProgress until then, which
 * ncclCommGetAsyncError reports too.  Over UCX the proxy's operations are
 * triggered by the streams, so they are done when the streams are. */
MPN_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  MPN_CHECK(mpn_comm_check(comm, "ncclCommFinalize", 1));
  /* As destroy: a window job of the open group would find comm finalized at
   * ncclGroupEnd and leave its peers waiting in the registration. */
  MPN_CHECK(check_not_in_group(comm, "ncclCommFinalize"));
  /* Held while it waits: an abort of another thread (which ends the wait,
   * drain.h) frees comm only after it (launches_wait). */
  MPN_CHECK(mpn_comm_hold_for(comm, "ncclCommFinalize"));
  comm->finalized_ns = mpn_clock_now_ns();
  __atomic_store_n(&comm->state, MPN_COMM_FINALIZED, __ATOMIC_RELEASE);
  MPN_INFO(MPN_SUBSYS_INIT, "comm %p rank %d finalized", (void*)comm, comm->rank);
  ncclResult_t res;
  if (!comm->config.blocking)
    res = mpn_drain_done(comm) ? ncclSuccess : ncclInProgress;
  else
    res = mpn_drain_wait(comm, "ncclCommFinalize", comm_failed);
  mpn_comm_release(comm);
  return res;
}

/* Takes the freeing of comm for this call (1), or finds that a destroy or
 * abort of another thread has it (0, *res set): a second abort then asks
 * that one to stop waiting (for a creation, a split, or the streams) and
 * returns, a second destroy is refused.  Two of them freeing comm at once
 * joined one creation thread twice and freed comm twice. */
static int close_claim(struct ncclComm* comm, int abort, const char* caller, ncclResult_t* res) {
  if ((*res = mpn_comm_hold_for(comm, caller)) != ncclSuccess) return 0; /* freed since mpn_comm_check */
  int ours = !__atomic_exchange_n(&comm->closing, 1, __ATOMIC_ACQ_REL);
  *res = ncclSuccess;
  if (!ours && abort) {
    comm->abort_flag = 1;
    mpn_p2p_mark_aborted(comm, -1); /* (as comm_free: the destroy under way may wait for a blocked launch) */
    mpn_init_split_abort(comm);
  } else if (!ours) {
    *res = MPN_REFUSE(NULL, ncclInvalidUsage, "%s: comm %p is being destroyed or aborted by another thread", caller,
                      (void*)comm);
  }
  mpn_comm_release(comm); /* (the freeing waits for the hold: comm stays until here) */
  return ours;
}

MPN_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL: destroying NULL is a no-op */
  MPN_CHECK(mpn_comm_check(comm, "ncclCommDestroy", 0));
  MPN_CHECK(check_not_in_group(comm, "ncclCommDestroy"));
  ncclResult_t claim;
  if (!close_claim(comm, 0, "ncclCommDestroy", &claim)) return claim;
  comm_join_init(comm, 0);
  /* As NCCL's, a destroy finalizes first: the streams must be done with
   * what is freed below.  If that ends in a timeout or an error of comm's
   * (drain.h), comm goes as in abort. */
  int state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  if (state == MPN_COMM_READY || state == MPN_COMM_FINALIZED) {
    __atomic_store_n(&comm->state, MPN_COMM_FINALIZED, __ATOMIC_RELEASE);
    /* A launch of another thread that still holds comm marks its streams
     * first (comm_free waits for it anyway). */
    launches_wait(comm);
    ncclResult_t res = mpn_drain_wait(comm, "ncclCommDestroy", comm_failed);
    if (res != ncclSuccess) {
      MPN_WARN("%s; freeing the communicator as ncclCommAbort does", mpn_error_last(comm));
      comm_free(comm, 1);
      return res;
    }
  }
#ifdef HAVE_UCX
  /* Destroy lets the UCX lanes finish what the streams gave them; abort
   * does not wait. */
  comm->ucx_clean = mpn_ucx_staged_quiesce(comm);
#endif
  MPN_INFO(MPN_SUBSYS_INIT, "comm %p rank %d nranks %d destroyed", (void*)comm, comm->rank,
           comm->nranks);
  mpn_comm_free(comm);
  return ncclSuccess;
}

MPN_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  MPN_CHECK(mpn_comm_check(comm, "ncclCommAbort", 0));
  MPN_CHECK(check_not_in_group(comm, "ncclCommAbort"));
  ncclResult_t claim;
  if (!close_claim(comm, 1, "ncclCommAbort", &claim)) return claim;
  MPN_INFO(MPN_SUBSYS_INIT, "comm %p rank %d aborted", (void*)comm, comm->rank);
  comm_free(comm, 1);
  return ncclSuccess;
}

ncclResult_t mpincclCommGetMPIComm(ncclComm_t comm, MPI_Comm* mpicomm) MPN_EXPORT;
ncclResult_t mpincclCommGetMPIComm(ncclComm_t comm, MPI_Comm* mpicomm) {
  MPN_CHECK(query_hold(comm, "mpincclCommGetMPIComm", MPN_COMM_NEED_QUERY, mpicomm != NULL, "mpicomm"));
  MPI_Comm mine = comm->mpi_user;
  ncclResult_t res = mine != MPI_COMM_NULL ? ncclSuccess
                                           : MPN_REFUSE(comm, ncclInvalidUsage,
                                                        "mpincclCommGetMPIComm: comm %p was made from a unique id, "
                                                        "not from an MPI communicator",
                                                        (void*)comm);
  mpn_comm_release(comm);
  if (res == ncclSuccess) *mpicomm = mine;
  return res;
}
