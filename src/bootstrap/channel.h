/*
 * channel.h - the message layer under the bootstrap: tagged messages between
 * ranks of bootstrap contexts, delivered in process memory when both ranks
 * live in the same process and over MPI_COMM_WORLD (non-blocking calls under
 * one lock) otherwise.  Messages wait in a mailbox until received, so early
 * arrivals are never lost.
 */
#ifndef MPN_BOOTSTRAP_CHANNEL_H_
#define MPN_BOOTSTRAP_CHANNEL_H_

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/** Where a rank lives: its process and that process's MPI_COMM_WORLD rank. */
typedef struct {
  uint64_t proc;  /**< process identity (host, boot, pid, start time) */
  int32_t world;  /**< rank in MPI_COMM_WORLD, -1 when MPI is not used */
  int32_t pad;
} mpn_endpoint_t;

/** Pseudo-rank of the rendezvous service in the id creator's process. */
#define MPN_RANK_SERVICE (-1)

/** Message kinds in the tag space. */
#define MPN_TAG_HELLO 0x7ffffff0
/** The rendezvous's answer to one call (attempt: random, per call) has a
 * tag of its own, so that an answer its caller gave up waiting for is never
 * taken by a later call of that rank, nor by another caller of the same rank. */
static inline int mpn_tag_table(uint64_t attempt) { return (int)(attempt & 0x3fffffff); }
/** A failure notice (mpn_chan_recv): negative, apart from every other tag. */
#define MPN_TAG_FAILED (-2)
/** How long a sender of a failure waits for its delivery (best effort: a
 * receiver that does not progress MPI meanwhile takes it in later). */
#define MPN_CHAN_NOTICE_WAIT_NS 1000000000ull

/** Identity of the calling process (a forked child gets its own). */
uint64_t mpn_chan_proc_id(void);

/**
 * Makes MPI usable by the channel.  When MPI is not initialized and may_init
 * is set, calls MPI_Init_thread (MPI_THREAD_MULTIPLE) and finalizes MPI at
 * exit.  Fails with a message when MPI is finalized or cannot start.
 */
ncclResult_t mpn_chan_mpi_start(int may_init);

/**
 * MPI_COMM_WORLD rank given by the launcher's environment (mpirun, PMIx,
 * PMI), readable before MPI is initialized; -1 when no launcher started us.
 */
int mpn_chan_launcher_rank(void);

/** True once mpn_chan_mpi_start succeeded and MPI is not finalized. */
int mpn_chan_mpi_ready(void);

/** MPI thread level provided, and whether the library initialized MPI. */
int mpn_chan_mpi_thread_level(void);
int mpn_chan_mpi_owned(void);

/** This process's endpoint (world = -1 until MPI is started). */
mpn_endpoint_t mpn_chan_self(void);

/**
 * Sends len bytes to rank dst of context key at endpoint to.  Returns once
 * the data is copied; never waits for the receiver.
 */
ncclResult_t mpn_chan_send(uint64_t key, int src, int dst, const mpn_endpoint_t* to, int tag,
                           const void* buf, size_t len);

/**
 * Receives the oldest message of context key from src to dst with tag.
 * Waits until deadline_ns (CLOCK_MONOTONIC), then returns ncclTimeout; stops
 * early with ncclRemoteError when *abort becomes non-zero, or when a failure
 * notice to dst of context key is filed (a message with tag MPN_TAG_FAILED
 * from any rank, whose text names why; it stays filed, so every later wait
 * of dst in the context stops too).  The message length must be len (else
 * ncclInternalError).
 */
ncclResult_t mpn_chan_recv(uint64_t key, int dst, int src, int tag, void* buf, size_t len,
                           uint64_t deadline_ns, const volatile int* abort);

/** As mpn_chan_recv, for a message of at most len bytes, whose length goes
 * to *got (a rendezvous's answer: its table, or an error alone). */
ncclResult_t mpn_chan_recv_upto(uint64_t key, int dst, int src, int tag, void* buf, size_t len, size_t* got,
                                uint64_t deadline_ns, const volatile int* abort);

/**
 * Waits until every message of context key that this process sent over MPI
 * is delivered (the receiving process has taken it in).  Collectives end with it: a message
 * above MPI's eager limit moves only while its sender progresses, and the
 * sender may next spend a long time outside the library.
 */
ncclResult_t mpn_chan_flush(uint64_t key, uint64_t deadline_ns, const volatile int* abort);

/** True while some message of this process is not yet delivered. */
int mpn_chan_sending(void);

/** Drives MPI once: finishes sends, files incoming messages. */
void mpn_chan_progress(void);

/** Deadline MPINCCL_BOOTSTRAP_TIMEOUT seconds from now. */
uint64_t mpn_chan_deadline(void);

/**
 * Waits for an MPI request, testing it under the channel lock so that other
 * threads keep progressing; same deadline and abort rules as mpn_chan_recv.
 */
ncclResult_t mpn_chan_mpi_wait(MPI_Request* req, uint64_t deadline_ns, const volatile int* abort);

/** Rank of context key that filed a failure notice to dst, or -1 (none). */
int mpn_chan_noticed(uint64_t key, int dst);

/** Drops the mailbox's messages to rank dst of context key, which is going
 * away (late ones, failure notices), and those that come later (for the
 * latest 64 such ranks; context keys are never used again). */
void mpn_chan_forget(uint64_t key, int dst);

/** As mpn_chan_forget, for the messages of one tag only: the answer to a
 * call whose caller gave up waiting for it (the rank may call again with
 * the same context, under another tag).  The latest 64 such answers are
 * kept apart from the ranks mpn_chan_forget keeps, so that abandoned calls
 * never push a rank that went away out. */
void mpn_chan_forget_tag(uint64_t key, int dst, int tag);

/**
 * Frees a communicator's MPI communicator (a split's) at its destroy or
 * abort, on a thread that may: at once under MPI_THREAD_MULTIPLE or on
 * MPI's main thread; else the main thread's next progress of the channel
 * does it, or MPI_Finalize.  Nothing after MPI_Finalize (it freed them).
 */
void mpn_chan_comm_free(MPI_Comm* comm);

/** Ranks of MPI_COMM_WORLD, or 0 while MPI is not started here. */
int mpn_chan_world_size(void);

/** Messages the mailbox holds for rank dst of context key (for tests). */
int mpn_chan_held(uint64_t key, int dst);

/*
 * Rendezvous service hooks (rendezvous.c): the channel hands every HELLO for
 * MPN_RANK_SERVICE to mpn_service_deliver, under the channel lock.
 */
void mpn_service_deliver(uint64_t key, const void* payload, size_t len);

/** In a child of fork(), before anything else: the service's thread, which
 * the child does not have, serves nothing there. */
void mpn_service_after_fork(void);

/**
 * Runs fn(arg), which makes MPI calls (on a user's communicator), under the
 * channel lock on a thread that may call MPI: the calling thread, or, on a
 * worker below MPI_THREAD_MULTIPLE, the next driver, waiting for it.
 * blocks: fn may wait for other processes (MPI_Comm_split); under
 * MPI_THREAD_MULTIPLE it then runs without the lock, so that other threads'
 * set-up goes on meanwhile.  Returns 0 once fn ran; MPN_CHAN_NOT_RUN when
 * it never will: MPI is finalized, or *abort (may be NULL) was set before a
 * driver took it; MPN_CHAN_NO_MEMORY when the hand-over could not be
 * allocated (the error text is set).
 */
enum { MPN_CHAN_NOT_RUN = -1, MPN_CHAN_NO_MEMORY = -2 };
int mpn_chan_call(void (*fn)(void*), void* arg, int blocks, const volatile int* abort);

/**
 * Marks the calling thread as a worker: a thread the library started for
 * creation.  Below MPI_THREAD_MULTIPLE a worker never calls MPI; its sends
 * and MPI calls wait for a driver.  mpn_chan_worker_end before it exits.
 */
void mpn_chan_worker_begin(void);
void mpn_chan_worker_end(void);

/** Why an application's thread drives (mpn_chan_drive). */
typedef enum {
  MPN_CHAN_DRIVE_CREATE, /**< it waits in a creation call it made: always */
  MPN_CHAN_DRIVE_END,    /**< it ends a communicator being created: only on MPI's main thread
                              under MPI_THREAD_FUNNELED or SINGLE */
  MPN_CHAN_DRIVE_POLL    /**< in passing (ncclCommGetAsyncError): as END, and skipped when
                              another thread holds the channel */
} mpn_chan_drive_t;

/**
 * Below MPI_THREAD_MULTIPLE, while workers live or their sends wait, does
 * their MPI work once on the calling application thread (tasks, sends,
 * incoming messages), as how allows.  Nothing on a worker or under
 * MPI_THREAD_MULTIPLE.
 */
void mpn_chan_drive(mpn_chan_drive_t how);

/** Runs fn(arg) with the channel lock held (service bookkeeping). */
void mpn_chan_locked(void (*fn)(void*), void* arg);

#endif /* MPN_BOOTSTRAP_CHANNEL_H_ */
