/*
 * p2p.c - send/receive scheduling.  The data path (self copies, CUDA IPC
 * within a node, UCX between nodes) is not built in this version: every
 * non-empty send or receive is refused with ncclInvalidUsage and a message,
 * after the full argument checks of enqueue.c.
 */
#include "p2p/p2p.h"

#include "core/comm.h"
#include "core/error.h"
#include "transport.h"

ncclResult_t mpn_p2p_launch(struct ncclComm* comm, mpn_op_t* ops) {
  const mpn_op_t* op = ops;
  return mpn_error_set(comm, ncclInvalidUsage,
                       "%s with peer %d (transport %s): the point-to-point data path is not "
                       "available in this version of mpinccl",
                       op->kind == MPN_OP_SEND ? "ncclSend" : "ncclRecv", op->peer,
                       mpn_transport_name(comm->transport[op->peer]));
}
