/*
 * watchdog.c - one thread per process that checks, every
 * MPINCCL_WATCHDOG_MS, whether the processes of same-host peers are alive
 * (mpn_proc_gone: the pid, its zombie state and its start time), and
 * whether UCX found a peer over UCX unreachable (its endpoint failed: how a
 * peer on another host is found gone).  A peer found gone turns into ncclRemoteError on each
 * communicator that has it, with a message naming it, and every stream
 * flag shared with it is released (over UCX, its operations fail and the
 * waits for its signals are let go) so that no stream waits forever; the
 * application then calls ncclCommAbort.  A peer that aborted its
 * communicator (and lives on) is treated the same way: its release is
 * repeated here for this rank's queued graph replays.  It also takes in the news of CUDA
 * graphs destroyed (p2p/pair.c), so that their slots serve again even in a
 * process that launches nothing more.
 */
#define _GNU_SOURCE /* pthread_mutex_clocklock */
#include "core/watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "core/proc.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "rma/rma.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/net.h"
#include "ucx/winstage.h"
#endif

static pthread_mutex_t watchdog_lock = PTHREAD_MUTEX_INITIALIZER;
enum { RELEASES_PER_CHECK = 16 };
static int watchdog_running;

/* Releases at each check for a peer gone or aborted: stream writes queued
 * before the first release (a host far ahead of its GPU) may have undone
 * it, and a captured wait puts its flag back to 0 after it, so each replay
 * of a graph queued behind one takes a release.  A few in a row, so that
 * queued replays drain at more than one per check (a host blocked in
 * cudaGraphLaunch behind them, its launch queue full, cannot abort). */
static void release_again(struct ncclComm* comm, int peer) {
  for (int k = 0; k < RELEASES_PER_CHECK; k++) {
    if (k) usleep(500);
    mpn_p2p_release_peer(comm, peer);
  }
}

/* Whether a peer over UCX is known gone: UCX found it unreachable (its
 * endpoint failed), which is how a peer on another host, whose process this
 * one cannot look up, is found gone, while this rank still waits for
 * signals of its.  A peer that closed its communicator after its last
 * signal fails its endpoint too, and is no failure (its operations in
 * flight with this rank, if any, fail on their own: mpn_ucx_poll_errors). */
static int ucx_lost(struct ncclComm* comm, int peer) {
#ifdef HAVE_UCX
  /* (a one-sided call with it captured in a CUDA graph counts unless it
   * closed cleanly: a replay may wait for it, unseen by the host) */
  return comm->transport[peer] == MPN_TRANSPORT_UCX && mpn_ucx_peer_unreachable(comm, peer) &&
         mpn_ucx_peer_awaited(comm, peer);
#else
  (void)comm;
  (void)peer;
  return 0;
#endif
}

/* A peer over UCX that told this rank it aborted its communicator (and
 * lives on) sends no more signals, and no endpoint failure says so
 * (mpn_ucx_peer_unreachable leaves it out): as a peer of a pair that
 * aborted (below), the waits for its signals are let go, at each check.
 * Returns whether peer is such a one. */
static int ucx_aborted_release(struct ncclComm* comm, int peer) {
#ifdef HAVE_UCX
  if (comm->transport[peer] != MPN_TRANSPORT_UCX || !mpn_ucx_peer_aborted(comm, peer)) return 0;
  mpn_ucx_poll_errors(comm); /* (its notice: ncclRemoteError naming it, the communicator broken) */
  mpn_ucx_rma_release_peer(comm, peer);
  return 1;
#else
  (void)comm;
  (void)peer;
  return 0;
#endif
}

/* A same-host peer whose process is gone after a normal destroy of its
 * communicator that left nothing of this rank's waiting for it (its record
 * in the pairs: p2p.h, rma.h) is no failure, as in NCCL: the communicator
 * goes on, and only later calls that name the peer are refused. */
static int left_normally(struct ncclComm* comm, int peer) {
  if (!mpn_p2p_peer_left(comm, peer) || !mpn_rma_peer_left(comm, peer)) return 0;
  __atomic_store_n(&comm->peer_gone[peer], MPN_PEER_LEFT, __ATOMIC_RELEASE);
  MPN_INFO(MPN_SUBSYS_INIT, "comm %p rank %d: rank %d ended its communicator normally and its process exited",
           (void*)comm, comm->rank, peer);
  return 1;
}

/* Whether nothing of this rank's can wait for a peer: over CUDA IPC, no
 * pair made with it (its messages and signals go through pairs) and no
 * signal of its awaited; over UCX (between processes of one host when
 * forced, NCCL_P2P_DISABLE), no operation with it not done, no one-sided
 * call with it captured in a graph and no signal of its awaited. */
static int shares_nothing(struct ncclComm* comm, int peer) {
#ifdef HAVE_UCX
  if (comm->transport[peer] == MPN_TRANSPORT_UCX) return mpn_ucx_peer_idle(comm, peer);
#endif
  if (comm->transport[peer] != MPN_TRANSPORT_IPC) return 0;
  mpn_pair_t* pairs[2];
  mpn_p2p_pairs_made(comm, peer, pairs);
  return pairs[0] == NULL && pairs[1] == NULL && mpn_rma_peer_left(comm, peer);
}

/* A same-host peer whose process is gone and that shared nothing with this
 * rank: no record tells a normal end from a crash, but nothing waits for
 * it, so the communicator goes on as in NCCL (a program whose communicator
 * outlives MPI_Finalize sees the ranks it never talked to exit first); later
 * calls naming it are refused.  A launch that passed that refusal before
 * the mark may make a pair after it: each round looks again. */
static int exited_unshared(struct ncclComm* comm, int peer) {
  if (!shares_nothing(comm, peer)) return 0;
  __atomic_store_n(&comm->peer_gone[peer], MPN_PEER_EXITED, __ATOMIC_RELEASE);
  MPN_INFO(MPN_SUBSYS_INIT,
           "comm %p rank %d: rank %d's process exited; it shared nothing with this rank, which goes on", (void*)comm,
           comm->rank, peer);
  return 1;
}

int mpn_watchdog_check(struct ncclComm* comm) {
  /* Finalized too: ncclCommFinalize and ncclCommDestroy wait for the streams,
   * which a peer found gone must release (drain.h). */
  int state = __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE);
  if (state != MPN_COMM_READY && state != MPN_COMM_FINALIZED) return 0;
  const mpn_topo_t* t = &comm->topo;
  const mpn_rank_info_t* me = &t->ranks[comm->rank];
  int found = 0;
  for (int peer = 0; peer < comm->nranks; peer++) {
    const mpn_rank_info_t* p = &t->ranks[peer];
    int local = p->proc != me->proc && mpn_topo_same_host(t, comm->rank, peer) && p->pidns == me->pidns &&
                p->pidns != 0; /* a process this one can look up */
    if (ucx_aborted_release(comm, peer)) continue;
    int gone_before = __atomic_load_n(&comm->peer_gone[peer], __ATOMIC_ACQUIRE);
    if (gone_before == MPN_PEER_LEFT) {
      /* A launch of calls made before the mark (a group still open then)
       * may count on more than the peer's record of its end: what waits
       * there fails as for any peer gone.  Skipped for good, it waited. */
      if (mpn_p2p_peer_left(comm, peer) && mpn_rma_peer_left(comm, peer)) continue;
      gone_before = MPN_PEER_HERE;
    }
    if (gone_before == MPN_PEER_EXITED) {
      if (shares_nothing(comm, peer)) continue;
      gone_before = MPN_PEER_HERE; /* a pair made since: what waits there fails as for any peer gone */
    }
    int lost = ucx_lost(comm, peer);
    if (!local && !gone_before && !lost) continue;
    if (gone_before) {
      if (local) release_again(comm, peer);
#ifdef HAVE_UCX
      /* (a captured wait puts its word back after it: each replay takes one) */
      if (comm->transport[peer] == MPN_TRANSPORT_UCX) mpn_ucx_rma_release_peer(comm, peer);
#endif
      continue;
    }
    if (local && mpn_p2p_peer_aborted(comm, peer)) { /* alive, but it let go of the flags it shares with this rank */
      if (!__atomic_load_n(&comm->broken, __ATOMIC_ACQUIRE)) {
        mpn_comm_set_broken(comm, ncclRemoteError, "rank %d aborted its communicator; abort this one too", peer);
      }
      release_again(comm, peer);
      continue;
    }
    if (!lost && !mpn_proc_gone(p->pid, p->start_time)) continue;
    if (!lost && (left_normally(comm, peer) || exited_unshared(comm, peer))) continue;
    __atomic_store_n(&comm->peer_gone[peer], MPN_PEER_GONE, __ATOMIC_RELEASE);
    found++;
    char text[256];
    snprintf(text, sizeof(text), "rank %d (process %d on %s) %s", peer, p->pid, p->host,
             lost ? "is unreachable over UCX: gone, or its host or the network failed" : "is gone");
    MPN_WARN("comm %p rank %d: %s", (void*)comm, comm->rank, text);
    mpn_comm_set_broken(comm, ncclRemoteError, "%s", text);
    mpn_p2p_mark_aborted(comm, peer); /* (no CUDA call: lets this rank's flag kernels go first) */
    mpn_p2p_release_peer(comm, peer);
#ifdef HAVE_UCX
    if (comm->transport[peer] == MPN_TRANSPORT_UCX) {
      mpn_ucx_peer_lost(comm, peer);
      mpn_ucx_rma_release_peer(comm, peer);
    }
#endif
  }
  return found;
}

/*
 * The thread's rounds hold round_lock; the process's exit takes it, bounded,
 * and stops the rounds (watchdog_stop_at_exit).  Registered with atexit
 * when the thread starts, after CUDA's own exit handler (the communicator
 * made CUDA calls by then), it runs before CUDA tears down: a round then
 * would make CUDA calls into a runtime going away, and report peers that
 * simply exited first as gone (a warning, and the communicator failed).
 */
static pthread_mutex_t round_lock = PTHREAD_MUTEX_INITIALIZER;
static int stopped;      /* under round_lock: no more rounds */
static pid_t thread_pid; /* the process whose thread runs (none in a child of fork) */
#define STOP_AT_EXIT_MS 1000

/* The checks' CUDA work (releasing flags) runs outside the registry's lock,
 * which every API call may take: a release that blocks holds up only the
 * destroy of its communicator (and, at most STOP_AT_EXIT_MS, the exit). */
static void* watchdog_main(void* arg) {
  (void)arg;
  for (;;) {
    usleep((useconds_t)mpn_param_int(MPN_PARAM_WATCHDOG) * 1000);
    pthread_mutex_lock(&round_lock);
    if (stopped) {
      pthread_mutex_unlock(&round_lock);
      return NULL;
    }
    mpn_pair_graph_reap_try(); /* graphs destroyed: their slots serve again, even where no launch comes */
    struct ncclComm** comms = NULL;
    int n = mpn_comm_hold_live(&comms);
    for (int i = 0; i < n; i++) {
      mpn_watchdog_check(comms[i]);
      mpn_comm_release(comms[i]);
    }
    free(comms);
    pthread_mutex_unlock(&round_lock);
  }
  return NULL;
}

int mpn_watchdog_stop(int64_t timeout_ms) {
  /* Read without a lock: a child of fork (which has no thread) may have
   * been made while another thread held one. */
  if (__atomic_load_n(&thread_pid, __ATOMIC_ACQUIRE) != getpid()) return 0;
  struct timespec until = mpn_clock_after_ms(timeout_ms);
  if (pthread_mutex_clocklock(&round_lock, CLOCK_MONOTONIC, &until) != 0)
    return 0; /* a round stuck: left to the exit */
  stopped = 1;
  pthread_mutex_unlock(&round_lock);
  return 1;
}

static void watchdog_stop_at_exit(void) { mpn_watchdog_stop(STOP_AT_EXIT_MS); }

ncclResult_t mpn_watchdog_start(const struct ncclComm* comm) {
  if (mpn_param_int(MPN_PARAM_WATCHDOG) == 0) return ncclSuccess;
  int needed = 0;
  for (int peer = 0; peer < comm->nranks && !needed; peer++) /* (over UCX: peers UCX finds unreachable) */
    needed = comm->topo.ranks[peer].proc != comm->topo.ranks[comm->rank].proc &&
             (mpn_topo_same_host(&comm->topo, comm->rank, peer) || comm->transport[peer] == MPN_TRANSPORT_UCX);
  if (!needed) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&watchdog_lock);
  if (!watchdog_running) {
    int err = mpn_proc_thread_detached(watchdog_main, NULL);
    if (err == 0) {
      watchdog_running = 1;
      __atomic_store_n(&thread_pid, getpid(), __ATOMIC_RELEASE);
      atexit(watchdog_stop_at_exit);
    } else
      res = mpn_error_set(NULL, ncclSystemError, "cannot start the watchdog thread: %s", strerror(err));
  }
  pthread_mutex_unlock(&watchdog_lock);
  return res;
}
