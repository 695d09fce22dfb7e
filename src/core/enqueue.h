/*
 * enqueue.h - operations as the API hands them to a group: argument-checked
 * descriptions of sends, receives and one-sided calls, kept in program order
 * until ncclGroupEnd schedules them.
 */
#ifndef MPN_CORE_ENQUEUE_H_
#define MPN_CORE_ENQUEUE_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

struct ncclComm;

typedef enum {
  MPN_OP_SEND,
  MPN_OP_RECV,
  MPN_OP_PUT_SIGNAL,
  MPN_OP_SIGNAL,
  MPN_OP_WAIT_SIGNAL
} mpn_op_kind_t;

typedef struct mpn_op {
  mpn_op_kind_t kind;
  struct ncclComm* comm;
  uint64_t comm_serial; /**< comm->serial when the call was made (set by mpn_group_add_op) */
  void* buf;            /**< send/recv/put source buffer */
  size_t count;
  ncclDataType_t dtype;
  size_t bytes;         /**< count * size of dtype */
  int peer;
  cudaStream_t stream;
  int capturing;        /**< stream is capturing a CUDA graph (set by ncclGroupEnd's checks) */
  unsigned long long capture_id; /**< that capture's id (CUDA's, unique in the process), or 0 */
  unsigned long long stream_id;  /**< mpn_cuda_stream_id of stream, asked once a group by ncclGroupEnd's
                                     checks (never of a capturing stream); 0: not asked, ask again */
  ncclWindow_t win;     /**< put: the peer's window */
  size_t offset;        /**< put: offset in the peer's window */
  int ctx;
  uint64_t seq;         /**< put/signal: the signal's running count to peer on ctx (rma.c) */
  int ndesc;                   /**< wait: number of descriptors */
  ncclWaitSignalDesc_t* descs; /**< wait: a copy owned by the op */
  struct mpn_op* next;
} mpn_op_t;

/** How many signals of peer on ctx the first n of descs wait for. */
static inline uint64_t mpn_descs_wanted(const ncclWaitSignalDesc_t* descs, int n, int peer, int ctx) {
  uint64_t wanted = 0;
  for (int i = 0; i < n; i++)
    if (descs[i].peer == peer && descs[i].ctx == ctx) wanted += (uint64_t)descs[i].opCnt;
  return wanted;
}

/** op->stream_id, or, where ncclGroupEnd's checks did not ask it (0), CUDA's
 *  answer now (mpn_cuda_stream_id, on the op's device, current). */
unsigned long long mpn_op_stream_id(const mpn_op_t* op);

/** Size in bytes of one element of a valid datatype. */
size_t mpn_dtype_size(ncclDataType_t dtype);

/** Name of a datatype for messages ("ncclFloat32"). */
const char* mpn_dtype_name(ncclDataType_t dtype);

/**
 * Checks count and datatype: valid type, count*size fits in size_t.  On
 * success stores the byte count.
 */
ncclResult_t mpn_check_count(struct ncclComm* comm, const char* caller, size_t count,
                             ncclDataType_t dtype, size_t* bytes);

/** Checks a peer rank: in [0, nranks) (or MPINCCL_PROC_NULL when allow_null). */
ncclResult_t mpn_check_peer(struct ncclComm* comm, const char* caller, int peer, int allow_null);

#endif /* MPN_CORE_ENQUEUE_H_ */
