/*
 * bootstrap.h - how the ranks of a communicator find each other and exchange
 * set-up data: rendezvous from a unique id, contexts from a known member list
 * (split, MPI communicators), and collectives (allgather, broadcast, barrier)
 * and tagged point-to-point messages used only during set-up.
 *
 * Works without CUDA.  Ranks in one process meet in process memory; ranks in
 * other processes over MPI.
 */
#ifndef MPN_BOOTSTRAP_BOOTSTRAP_H_
#define MPN_BOOTSTRAP_BOOTSTRAP_H_

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap/channel.h"
#include "nccl.h"

/** Contents of an ncclUniqueId (fits in NCCL_UNIQUE_ID_BYTES). */
typedef struct {
  uint32_t magic;      /**< MPN_BOOTSTRAP_ID_MAGIC */
  uint32_t flags;      /**< MPN_BOOTSTRAP_ID_MPI when the rendezvous uses MPI */
  uint64_t key;        /**< random; names the rendezvous */
  mpn_endpoint_t root; /**< the process serving the rendezvous */
} mpn_bootstrap_id_t;

#define MPN_BOOTSTRAP_ID_MAGIC 0x434e504du /* "MPNC" */
#define MPN_BOOTSTRAP_ID_MPI 0x1u

/** A bootstrap context: one rank's view of a group of ranks. */
typedef struct mpn_bootstrap {
  uint64_t key;               /**< names the context in every message */
  int rank, nranks;
  mpn_endpoint_t* eps;        /**< nranks endpoints, by rank */
  uint32_t seq;               /**< collectives issued so far (same on all ranks) */
  uint32_t splits;            /**< splits issued so far (same on all ranks) */
  const volatile int* abort;  /**< set by ncclCommAbort; stops every wait */
  int left_by;                /**< -1, or the rank that left the collectives (mpn_bootstrap_fail) */
} mpn_bootstrap_t;

/**
 * Creates a unique id.  With MPI (MPINCCL_BOOTSTRAP=mpi, or auto under an
 * MPI launcher or with MPI initialized) the calling process serves the
 * rendezvous; under MPI_THREAD_MULTIPLE a helper thread serves it even if
 * this process never joins, until a round of it succeeds.  Otherwise the id is valid within this process.
 */
ncclResult_t mpn_bootstrap_id_create(mpn_bootstrap_id_t* id);

/** Creates an id for ranks that all live in this process (ncclCommInitAll). */
void mpn_bootstrap_id_create_local(mpn_bootstrap_id_t* id);

/**
 * Joins the rendezvous named by id as rank of nranks.  Collective over the
 * nranks callers.  Fails with ncclInvalidArgument when callers disagree
 * (two callers with one rank, different nranks), ncclTimeout after
 * MPINCCL_BOOTSTRAP_TIMEOUT.
 */
ncclResult_t mpn_bootstrap_rendezvous(const mpn_bootstrap_id_t* id, int nranks, int rank,
                                      const volatile int* abort, mpn_bootstrap_t** out);

/**
 * Tells the rendezvous named by id that rank of nranks failed before it
 * could join (res, and the calling thread's error text, say why): the
 * other callers, waiting or still to come, get ncclRemoteError naming it
 * instead of waiting until MPINCCL_BOOTSTRAP_TIMEOUT.  Best effort; the
 * thread's error text is kept.
 */
void mpn_bootstrap_rendezvous_fail(const mpn_bootstrap_id_t* id, int nranks, int rank, ncclResult_t res);

/** Bytes of the table a rendezvous of nranks answers its callers with. */
size_t mpn_bootstrap_table_bytes(int nranks);

/**
 * Ids this process holds a record of as their rendezvous's server: those
 * with a round open, or whose failure lingers (MPINCCL_BOOTSTRAP_LINGER);
 * for tests.
 */
int mpn_bootstrap_records_held(void);

/** Creates a context whose members are already known to every member. */
ncclResult_t mpn_bootstrap_create(uint64_t key, int nranks, int rank, const mpn_endpoint_t* eps,
                                  const volatile int* abort, mpn_bootstrap_t** out);

/**
 * Creates a context over the processes of an MPI communicator (collective
 * over it): rank = MPI rank.
 */
ncclResult_t mpn_bootstrap_from_mpi(MPI_Comm comm, const volatile int* abort,
                                    mpn_bootstrap_t** out);

/**
 * Splits a context as MPI_Comm_split does: ranks with equal color form a new
 * context, ordered by key then by old rank.  A negative color gives *out =
 * NULL.  Collective over parent; its waits stop when *abort is set (the
 * child's flag, so that aborting the child ends them), or parent's own flag
 * when abort is NULL.
 */
ncclResult_t mpn_bootstrap_split(mpn_bootstrap_t* parent, int color, int key, const volatile int* abort,
                                 mpn_bootstrap_t** out);

/**
 * Leaves the context's collectives after a failure that keeps this rank
 * from one its peers take part in (res, and the calling thread's error
 * text, say why): sends every peer a notice, which ends their waits in
 * the context at once with ncclRemoteError instead of at
 * MPINCCL_BOOTSTRAP_TIMEOUT.  The context is out of step from then on:
 * every later collective of it fails at once, on every rank.  A second
 * call, or one after a peer's notice came, sends nothing.  The calling
 * thread's error text is kept.  Returns res.
 */
ncclResult_t mpn_bootstrap_fail(mpn_bootstrap_t* b, ncclResult_t res);

/** Every rank contributes size bytes at buf + rank*size; all get all. */
ncclResult_t mpn_bootstrap_allgather(mpn_bootstrap_t* b, void* buf, size_t size);

/** Root's size bytes reach every rank. */
ncclResult_t mpn_bootstrap_bcast(mpn_bootstrap_t* b, void* buf, size_t size, int root);

/** Returns once every rank has entered. */
ncclResult_t mpn_bootstrap_barrier(mpn_bootstrap_t* b);

/** Tagged point-to-point message inside the context (tag >= 0). */
ncclResult_t mpn_bootstrap_send(mpn_bootstrap_t* b, int peer, int tag, const void* buf,
                                size_t size);
ncclResult_t mpn_bootstrap_recv(mpn_bootstrap_t* b, int peer, int tag, void* buf, size_t size);

/** True when rank peer lives in the caller's process. */
static inline int mpn_bootstrap_same_process(const mpn_bootstrap_t* b, int peer) {
  return b->eps[peer].proc == b->eps[b->rank].proc;
}

/** Frees the context (not collective). */
void mpn_bootstrap_destroy(mpn_bootstrap_t* b);

#endif /* MPN_BOOTSTRAP_BOOTSTRAP_H_ */
