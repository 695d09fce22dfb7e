/*
 * transport.h - the transports between two ranks and the one place that
 * chooses, once per peer at communicator creation, which one carries their
 * traffic.
 */
#ifndef MPN_TRANSPORT_H_
#define MPN_TRANSPORT_H_

#include <stdint.h>

#include "nccl.h"

struct ncclComm;

typedef enum {
  MPN_TRANSPORT_SELF = 0, /**< a rank to itself */
  MPN_TRANSPORT_LOCAL,    /**< same process: direct device pointers */
  MPN_TRANSPORT_IPC,      /**< same host, other process: CUDA IPC */
  MPN_TRANSPORT_UCX,      /**< anything else, or forced: UCX */
  MPN_TRANSPORT_COUNT
} mpn_transport_kind_t;

/** The most ranks a communicator with a peer over UCX may have: the UCX tags
 * of staged and captured transfers carry so many bits of each rank
 * (ucx/net.c), and senders that far apart would take each other's data. */
#define MPN_TRANSPORT_UCX_MAX_RANKS (1 << 13)

/** Short name for logs ("self", "local", "ipc", "ucx"). */
const char* mpn_transport_name(mpn_transport_kind_t kind);

/**
 * Chooses a transport for every peer from the topology and the parameters
 * MPINCCL_TRANSPORT and NCCL_P2P_DISABLE; fills comm->transport.  Fails with
 * ncclInvalidUsage when a forced transport cannot reach a peer.
 */
ncclResult_t mpn_transport_choose(struct ncclComm* comm);

/** Reads what the choice needs from the environment, once per process: on
 * the thread that starts creation, never on a creation thread. */
void mpn_transport_preload(void);

/**
 * 1 when peer is this rank or another of this process and MPS serves either
 * of them: their streams are ordered with CUDA events instead of stream
 * memory waits, which could hold one of an MPS client's few hardware queues
 * while the stream that would release them sits behind it (docs/P2P.md,
 * known problem 2).  Send/receive and the one-sided signals both ask here.
 */
int mpn_transport_by_events(const struct ncclComm* comm, int peer);

/**
 * 1 when kernels of this rank can read and write peer's device memory: a
 * peer on the same GPU, or on a GPU this one maps (every peer that the
 * choice gave CUDA IPC or plain pointers, both ranks with a GPU).
 */
int mpn_transport_kernel_reach(const struct ncclComm* comm, int peer);

/** Logs the choice per peer at INFO. */
void mpn_transport_log(const struct ncclComm* comm);

#endif /* MPN_TRANSPORT_H_ */
