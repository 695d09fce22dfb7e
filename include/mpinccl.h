/*
 * mpinccl.h - mpinccl's extensions to the NCCL interface.
 *
 * Communicators made directly from an MPI communicator, the way back to it,
 * and a null peer for halo exchanges at the edge of a domain.
 */
#ifndef MPINCCL_H_
#define MPINCCL_H_

#include <mpi.h>

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Version of the mpinccl extensions (independent of NCCL_VERSION_CODE). */
#define MPINCCL_VERSION_MAJOR 0
#define MPINCCL_VERSION_MINOR 1

/**
 * Peer value that ncclSend and ncclRecv accept as a no-op, like MPI_PROC_NULL:
 * a halo code can pass it for a neighbour beyond a non-periodic boundary.
 * Distinct from every valid rank and from -1.
 */
#define MPINCCL_PROC_NULL (-2)

/**
 * Creates a communicator over the processes of an MPI communicator.
 *
 * Collective over mpicomm; no unique id is needed.  The rank in the new
 * communicator is the caller's rank in mpicomm, and the CUDA device is the
 * calling thread's current device.  config may be NULL; config->blocking = 0
 * makes the call return ncclInProgress and complete in the background
 * (poll ncclCommGetAsyncError).  The set-up duplicates mpicomm
 * (MPI_Comm_idup), the only collective the library runs on it: its own
 * (the rest of the set-up, later splits' MPI_Comm_split) run on that
 * duplicate, so the program may run collectives of its own on mpicomm
 * while splits run in the background.  A non-blocking call duplicates in
 * the background: the program must not start collectives on mpicomm before
 * the creation is done.
 *
 * @param [out] comm     New communicator.
 * @param [in]  mpicomm  Any intra-communicator.
 * @param [in]  config   Options, or NULL for the defaults.
 */
ncclResult_t mpincclCommInitMPI(ncclComm_t* comm, MPI_Comm mpicomm, ncclConfig_t* config);

/**
 * Returns the MPI communicator behind a communicator made by
 * mpincclCommInitMPI, or by ncclCommSplit of such a communicator: for the
 * former the MPI_Comm the caller passed, for the latter one the library made
 * with MPI_Comm_split and frees in ncclCommDestroy.  MPI ranks equal the
 * communicator's ranks.  Communicators made from a unique id have none:
 * the call returns ncclInvalidUsage.
 *
 * @param [in]  comm     Communicator.
 * @param [out] mpicomm  MPI communicator; the caller must not free it.
 */
ncclResult_t mpincclCommGetMPIComm(ncclComm_t comm, MPI_Comm* mpicomm);

#ifdef __cplusplus
}
#endif

#endif /* MPINCCL_H_ */
