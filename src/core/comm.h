/*
 * comm.h - the communicator: identity, options, set-up context, topology,
 * life-cycle state and the registry that tells a live handle from a
 * destroyed one.
 */
#ifndef MPN_CORE_COMM_H_
#define MPN_CORE_COMM_H_

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "core/alias.h"
#include "core/config.h"
#include "core/topo.h"
#include "nccl.h"

typedef enum {
  MPN_COMM_INITIALIZING = 0,
  MPN_COMM_READY,
  MPN_COMM_FAILED,
  MPN_COMM_FINALIZED
} mpn_comm_state_t;

/** How a communicator is being made (see init.c). */
typedef enum { MPN_INIT_RANK, MPN_INIT_MPI, MPN_INIT_SPLIT } mpn_init_kind_t;

/** A ticket given up before its turn came (init.c). */
typedef struct mpn_ticket {
  struct mpn_ticket* next;
  uint64_t ticket;
} mpn_ticket_t;

/** Tickets handed out in call order and served one at a time (init.c);
 *  all zero is a new order. */
typedef struct {
  uint64_t tickets, serving;
  int lock;              /**< spin lock (atomic) over advancing serving and over skipped */
  mpn_ticket_t* skipped; /**< tickets after serving given up, lowest first: serving passes over them */
} mpn_order_t;

/** One ticket of an order; pending until its turn has come and gone. */
typedef struct {
  mpn_order_t* order;
  uint64_t ticket;
  int pending;
} mpn_turn_t;

typedef struct mpn_init_job {
  mpn_init_kind_t kind;
  struct ncclComm* comm;   /**< the communicator being made (NULL: split without color) */
  ncclComm_t* user_out;    /**< where the caller wants the handle */
  int device;              /**< CUDA device of the calling thread, -1 if none */
  int blocking;            /**< the call's config.blocking (also for a split without color, which
                                makes no communicator: NCCL takes it from the config it is given) */
  mpn_bootstrap_id_t id;   /**< MPN_INIT_RANK */
  int nranks, rank;        /**< MPN_INIT_RANK */
  MPI_Comm mpi_comm;       /**< MPN_INIT_MPI: the library's duplicate of mpi_user (made at the call), the job's until
                                its communicator takes it; a split: the library's own communicator */
  MPI_Comm mpi_user;       /**< MPN_INIT_MPI: the program's MPI_Comm; a split: the one MPI_Comm_split made */
  struct ncclComm* parent; /**< MPN_INIT_SPLIT */
  int color, key;          /**< MPN_INIT_SPLIT */
  mpn_turn_t split_turn;   /**< MPN_INIT_SPLIT: its turn among the parent's splits (init.c) */
  mpn_turn_t mpi_turn;     /**< MPN_INIT_MPI, or a split of an MPI-made parent: its turn among the
                                MPI collectives of the calling thread's creations (init.c) */
  int finished;            /**< set (atomic) when its thread is done with it (init.c) */
  ncclResult_t result;     /**< how its creation ended (ncclInProgress: it never ran; init.c) */
  char error[512];         /**< and why it failed, for the calling thread (init.c) */
  struct mpn_init_job* next;
} mpn_init_job_t;

/** What the watchdog found of a peer's process (ncclComm.peer_gone). */
enum {
  MPN_PEER_HERE = 0,
  MPN_PEER_GONE = 1,  /**< gone with work of this rank's still waiting for it, or failed: the communicator failed */
  MPN_PEER_LEFT = 2,  /**< gone after a normal destroy that left nothing of this rank's waiting: later calls naming
                          it are refused, except a receive or wait for what it sent before its end (enqueue.c), the
                          communicator goes on; a launch of earlier calls that counts on more than its end's record
                          is watched (watchdog.c) */
  MPN_PEER_EXITED = 3 /**< gone, normally or not, sharing nothing with this rank (no pair, no signal of its
                           awaited): as MPN_PEER_LEFT, and a pair made later is watched (watchdog.c) */
};

struct ncclComm {
  uint64_t magic;
  uint64_t serial; /**< unique in the process, never reused: tells this comm from a later one at its address */
  int rank, nranks;
  int cuda_dev; /**< -1: no GPU (host-only communicator) */
  mpn_config_t config;
  mpn_bootstrap_t* bootstrap;
  mpn_topo_t topo;
  uint8_t* transport; /**< per peer: mpn_transport_kind_t */
  struct mpn_p2p* p2p; /**< send/receive state, made on first use (p2p.c) */
  struct mpn_rma* rma; /**< one-sided state and windows, made on first use (rma.c) */
  struct mpn_drain* drain; /**< streams this comm's operations went to, for finalize (drain.c) */
  struct mpn_alias_stream* alias[MPN_ALIAS_HANDLES]; /**< per default stream handle, streams for its use on several GPUs (alias.c) */
  uint64_t finalized_ns;   /**< when ncclCommFinalize was called (a non-blocking one's timeout) */
  uint8_t* peer_gone;      /**< per peer: MPN_PEER_* (watchdog.c; read with atomics) */
  struct mpn_ucx_comm* ucx; /**< UCX peers' addresses and endpoints (ucx/net.c) */
  struct mpn_ucx_staged* staged; /**< staging lanes of device data over UCX (ucx/staged.c) */
  struct mpn_ucx_rma* ucx_rma; /**< one-sided operations over UCX (ucx/winstage.c) */
  int ucx_clean; /**< destroy found the UCX work done (abort, failure: 0; ucx/staged.c) */
  struct mpn_ucx_gnode* ucx_rma_graphs; /**< captured one-sided calls' host-node state (ucx/gnodes.c): outlives ucx_rma
                                          until the communicator's end, where the proxy may still complete its commands */
  /** MPI_COMM_NULL unless made from (a split of) an MPI_Comm.  The library's
   *  MPI collectives (a split's) use mpi_comm, its own duplicate, never the
   *  program's: they may run in the background, in no order with the
   *  program's own collectives on that communicator. */
  MPI_Comm mpi_comm;
  MPI_Comm mpi_user;  /**< what mpincclCommGetMPIComm returns: the program's, or a split's */
  int mpi_user_owned; /**< a split's: freed with the communicator (mpi_comm always is) */
  volatile int abort_flag;
  int closing;  /**< atomic: a destroy or abort has taken the freeing of this comm (comm.c) */
  int launches; /**< group launches in flight that use this comm (group.c): freeing waits for them */
  int win_pending;                       /**< window calls of a non-blocking comm still running (rma/winasync.c) */
  int split_pending;                     /**< its non-blocking splits without a color still running in the
                                              background (init.c): ncclCommGetAsyncError answers ncclInProgress */
  mpn_order_t split_order;               /**< splits of this comm run one at a time, in call order (init.c) */
  volatile int* split_abort;             /**< the abort flag of the child whose split runs now (its waits watch
                                              it), under split_order's lock (init.c) */
  int state;        /**< mpn_comm_state_t, atomic */
  int async_error;  /**< ncclResult_t, atomic */
  int broken;       /**< atomic ncclResult_t, ncclSuccess until a peer is found gone or aborted: the flags shared
                         with it are released, so data calls would complete with no data; they are refused
                         with this code (mpn_comm_set_broken's first) and failed_text (mpn_comm_check) */
  int device_gone;  /**< atomic: its device was reset while it lived (core/renew.h): its streams, events and
                         device memory went with the old context, so nothing of them is read, waited for,
                         freed or given back to a pool again */
  pthread_t init_thread;
  int init_thread_live;
  mpn_init_job_t* job;
  pthread_mutex_t error_lock;
  char error_text[512];
  unsigned long error_seq;
  char failed_text[512];         /**< why data calls are refused (mpn_comm_check): the first mpn_comm_set_broken's
                                      text (under error_lock) */
  struct mpn_reg* registrations; /**< live ncclCommRegister handles (under error_lock) */
};

#define MPN_COMM_MAGIC 0x6d706e636f6d6d31ull

/** Most ranks a communicator may have: the rendezvous gathers 24 bytes per
 *  rank in one message, whose length is 32 bits. */
#define MPN_MAX_RANKS (1 << 24)

/** Allocates a communicator in state INITIALIZING and registers it. */
ncclResult_t mpn_comm_alloc(const mpn_config_t* config, int device, struct ncclComm** out);

/** Frees the handles ncclCommRegister handed out and nobody released. */
void mpn_comm_free_registrations(struct ncclComm* comm);

/** Unregisters and frees everything the communicator holds (not collective). */
void mpn_comm_free(struct ncclComm* comm);

/**
 * Every live communicator, each held as by mpn_comm_hold (release each with
 * mpn_comm_release, then free *out): a destroy waits for the holder, which
 * may work on them without the registry's lock that API calls take.
 * Returns how many (0, *out NULL, if none or out of memory).
 */
int mpn_comm_hold_live(struct ncclComm*** out);

/** True when comm is a registered, not yet destroyed communicator. */
int mpn_comm_is_live(const struct ncclComm* comm);

/** What mpn_comm_check asks of a communicator besides being live. */
enum {
  MPN_COMM_NEED_LIVE = 0,    /**< nothing more */
  MPN_COMM_NEED_READY = 1,   /**< done initializing, not finalized, not aborted */
  MPN_COMM_NEED_QUERY = 2,   /**< as READY, finalized allowed (ncclCommCount and other queries, as NCCL) */
  MPN_COMM_NEED_HEALTHY = 3, /**< as READY, and no peer found gone or aborted (mpn_comm_set_broken): data calls */
};

/**
 * Checks a communicator argument of an API call: not NULL, live, and what
 * need (MPN_COMM_NEED_*) asks.  Sets the error text.
 */
ncclResult_t mpn_comm_check(struct ncclComm* comm, const char* caller, int need);

/** Marks a launch using comm, if comm is still live (1; else 0): freeing comm
 * waits until every such launch has released it (abort_flag set first). */
int mpn_comm_hold(struct ncclComm* comm);

/** The same, only if comm is still the communicator whose serial was taken
 * (0: any): one made later at a destroyed one's address is not held. */
int mpn_comm_hold_serial(struct ncclComm* comm, uint64_t serial);

/** The registry's lock, held across several mpn_comm_hold_serial_locked
 *  calls so that a group holds every communicator of its operations under
 *  one lock instead of one lock per operation (group.c). */
void mpn_comm_registry_lock(void);

/** Ends what mpn_comm_registry_lock began. */
void mpn_comm_registry_unlock(void);

/** mpn_comm_hold_serial with the registry's lock held by the caller. */
int mpn_comm_hold_serial_locked(struct ncclComm* comm, uint64_t serial);

/** mpn_comm_hold for an API call: ncclSuccess (held), or ncclInvalidArgument
 *  naming caller when comm was freed since its check (another thread). */
ncclResult_t mpn_comm_hold_for(struct ncclComm* comm, const char* caller);

/** Ends what mpn_comm_hold began. */
void mpn_comm_release(struct ncclComm* comm);

/**
 * Reports a failure of comm that no call returns, or not only a call (a
 * peer's report, a background call, what a launch left undone): code
 * becomes comm's asynchronous result (ncclCommGetAsyncError) unless an
 * earlier failure is there, which stays: the first failure is the cause,
 * later ones mostly its consequences (a peer gone, then the launches that
 * could not reach it).  Only then does the text (fmt) become comm's last
 * error and the calling thread's, before the code, so that
 * ncclGetLastError(comm) names the failure ncclCommGetAsyncError reports.
 * It replaces ncclInProgress (a creation that fails), which a creation's
 * end (init.c) never turns to ncclSuccess over it.  Returns whether code
 * was kept.
 */
int mpn_comm_fail_async(struct ncclComm* comm, ncclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** A peer was found gone or aborted (code: ncclRemoteError; ncclTimeout;
 *  ncclInvalidUsage for a device reset): reported as mpn_comm_fail_async,
 *  and data calls are refused from here on with the code and text of the
 *  first such report (mpn_comm_check), also when an earlier failure stays
 *  the asynchronous result. */
void mpn_comm_set_broken(struct ncclComm* comm, ncclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Whether the watchdog took peer's exit for a normal end (MPN_PEER_LEFT):
 *  a receive or wait may still take what it sent before (enqueue.c). */
static inline int mpn_comm_peer_ended(const struct ncclComm* comm, int peer) {
  return __atomic_load_n(&comm->peer_gone[peer], __ATOMIC_ACQUIRE) == MPN_PEER_LEFT;
}

static inline ncclResult_t mpn_comm_async(const struct ncclComm* comm) {
  return (ncclResult_t)__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE);
}

/** What ends a wait for peers: the code of comm's break (mpn_comm_set_broken:
 *  a peer found gone or aborted), else its asynchronous result when that
 *  is a peer's failure (ncclRemoteError, ncclTimeout); ncclSuccess if
 *  neither.  The break counts apart: an earlier failure that left the peers
 *  in step (a mismatch) stays the asynchronous result. */
static inline ncclResult_t mpn_comm_peer_failure(const struct ncclComm* comm) {
  ncclResult_t broken = (ncclResult_t)__atomic_load_n(&comm->broken, __ATOMIC_ACQUIRE);
  if (broken != ncclSuccess) return broken;
  ncclResult_t async = mpn_comm_async(comm);
  return async == ncclRemoteError || async == ncclTimeout ? async : ncclSuccess;
}

/** Runs a creation job to the end, in the calling thread. */
ncclResult_t mpn_init_job_run(mpn_init_job_t* job);

/** Lets go of a split job's parent, which the job holds (mpn_comm_hold) from
 *  its call until it ran or was discarded, so that a destroy waits for it. */
void mpn_init_job_release(mpn_init_job_t* job);

/** Lets go of the job's communicator, which the job holds from its call
 *  (its handle set then) until its creation is done with it; failed: the
 *  creation failed, or will not run, and the communicator is freed here,
 *  unless a destroy or abort of another thread took it, and the caller's
 *  handle set back to NULL. */
void mpn_init_job_let_go(mpn_init_job_t* job, int failed);

/** Ends the waits of the split of parent that runs now, if any (parent's
 *  destroy or abort, once parent->abort_flag is set): its child's flag. */
void mpn_init_split_abort(struct ncclComm* parent);

/** Waits until the thread running job is done with it, doing its MPI work
 * meanwhile below MPI_THREAD_MULTIPLE (mpn_chan_drive): always while a
 * creation call waits, only where MPI allows it when ending is set (a
 * destroy or abort, after which the job stops without MPI). */
void mpn_init_job_wait(const mpn_init_job_t* job, int ending);

/**
 * Runs creation jobs: one inline, several on threads (they rendezvous with
 * each other), or all in the background when non-blocking.  Frees the jobs
 * of blocking runs; returns the first error, or ncclInProgress.
 */
ncclResult_t mpn_init_jobs_launch(mpn_init_job_t* jobs);

/** Whether jobs mix blocking and non-blocking communicators (a group may not, as in NCCL). */
int mpn_init_jobs_mixed(const mpn_init_job_t* jobs);

/** Submits a creation job: queued inside a group, launched otherwise. */
ncclResult_t mpn_init_job_submit(mpn_init_job_t* job);

#endif /* MPN_CORE_COMM_H_ */
