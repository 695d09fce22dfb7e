/*
 * net_comm.h - what the UCX layer's other parts (rma.c) need of a
 * communicator's UCX state (net.c).
 */
#ifndef MPN_UCX_NET_COMM_H_
#define MPN_UCX_NET_COMM_H_

#include "ucx/proxy.h"

struct ncclComm;

/** Whether comm has UCX state (some rank of it uses UCX). */
int mpn_ucx_comm_ready(const struct ncclComm* comm);

/** peer's UCX endpoint state, or NULL when peer is not reached over UCX. */
mpn_ucx_peer_t* mpn_ucx_comm_peer(struct ncclComm* comm, int peer);

/** Where the proxy records a failed transfer of comm (see mpn_ucx_poll_errors). */
int* mpn_ucx_comm_error(struct ncclComm* comm);

/** Where the proxy tells comm's first failed transfer (mpn_ucx_cmd_t failure). */
mpn_ucx_failure_t* mpn_ucx_comm_failure(struct ncclComm* comm);

#endif /* MPN_UCX_NET_COMM_H_ */
