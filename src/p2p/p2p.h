/*
 * p2p.h - the send/receive engine: turns a group's sends and receives on one
 * communicator into stream work on the transports chosen per peer.
 */
#ifndef MPN_P2P_P2P_H_
#define MPN_P2P_P2P_H_

#include "core/enqueue.h"

struct ncclComm;

/**
 * Schedules a group's sends and receives on comm (program order, every op
 * already checked).  Returns once the work is enqueued on the streams.
 */
ncclResult_t mpn_p2p_launch(struct ncclComm* comm, mpn_op_t* ops);

#endif /* MPN_P2P_P2P_H_ */
