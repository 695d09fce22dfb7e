/*
 * channel_impl.h - the bootstrap channel's state, shared by its two halves:
 * channel.c (mailbox, sends, MPI progress, workers' tasks) and channel_life.c
 * (identity, MPI's start and finalize, fork, deferred communicator frees).
 */
#ifndef MPN_BOOTSTRAP_CHANNEL_IMPL_H_
#define MPN_BOOTSTRAP_CHANNEL_IMPL_H_

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>

struct msg; /* a filed message (channel.c) */

typedef struct pending {
  struct pending* next;
  uint64_t key; /* context of the message, for mpn_chan_flush */
  MPI_Request req;
  int world, bytes; /* destination and length, for a send posted later */
  char buf[];
} pending_t;

/* An MPI call a worker hands over (mpn_chan_call); it lives on the worker's stack. */
typedef struct task {
  struct task* next;
  void (*fn)(void*);
  void* arg;
  int done; /* 1: fn ran; -1: it never will (MPI finalized) */
} task_t;

#define GONE_MAX 64

/* The latest GONE_MAX (key, dst, tag) forgotten; n counts them all. */
typedef struct {
  struct {
    uint64_t key;
    int32_t dst;
    int32_t tag; /* ANY_TAG: every message to dst */
  } at[GONE_MAX];
  unsigned n;
} gone_ring_t;

/** All of the channel's state, behind its one recursive lock. */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  struct msg *head, *tail;             /* mailbox, oldest first */
  pending_t* sends;                    /* MPI sends not yet complete */
  pending_t *unposted, *unposted_tail; /* workers' sends, not yet given to MPI, oldest first */
  task_t *tasks, *tasks_tail;          /* workers' MPI calls, oldest first */
  /* Ranks of contexts that went away here (mpn_chan_forget), the latest:
   * keys are never used again, so a message to one that comes later (a
   * peer's failure notice) is dropped.  Answers whose callers gave up
   * (mpn_chan_forget_tag) have a ring of their own, so that many abandoned
   * calls cannot push a context out. */
  gone_ring_t gone_ranks, gone_answers;
  uint64_t proc;
  int mpi_ready, mpi_owned, thread_level, world_rank, world_size, tag;
  int workers;       /* live worker threads (atomic) */
  int mpi_inherited; /* a child of fork() of a process that used MPI: it may not */
} mpn_chan_state_t;

/** The state (channel.c). */
extern mpn_chan_state_t mpn_chan;

/** Makes the lock and the process identity, and installs the fork
 * handlers, once (channel_life.c); first in every entry point. */
void mpn_chan_init(void);

/** The MPI communicators whose free was handed over (mpn_chan_comm_free),
 * freed if this thread may make them (or finalizing). */
void mpn_chan_frees_run(int finalizing);

/** Whether frees wait (read without a lock, which a driver may hold). */
int mpn_chan_frees_waiting(void);

#endif /* MPN_BOOTSTRAP_CHANNEL_IMPL_H_ */
