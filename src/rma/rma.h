/*
 * rma.h - one-sided operations: windows, put with signal, signal, wait.
 */
#ifndef MPN_RMA_RMA_H_
#define MPN_RMA_RMA_H_

#include "core/enqueue.h"

struct ncclComm;

/**
 * Schedules a group's one-sided operations on comm (program order, already
 * checked).  Returns once the work is enqueued on the streams.
 */
ncclResult_t mpn_rma_launch(struct ncclComm* comm, mpn_op_t* ops);

#endif /* MPN_RMA_RMA_H_ */
