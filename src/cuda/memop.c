/*
 * memop.c - batches of stream memory operations.
 */
#include "cuda/memop.h"

#include <string.h>

#include "core/error.h"

void mpn_memops_init(mpn_memops_t* b, const mpn_driver_t* drv, cudaStream_t stream) {
  b->n = 0;
  b->drv = drv;
  b->stream = (CUstream)stream;
}

ncclResult_t mpn_memops_flush(mpn_memops_t* b) {
  const mpn_driver_t* drv = b->drv;
  unsigned n = b->n;
  b->n = 0; /* a failed batch is not issued again by the next flush */
  if (n) MPN_CU_CHECK(drv, stream_batch_mem_op(b->stream, n, b->ops, 0));
  return ncclSuccess;
}

ncclResult_t mpn_memops_add(mpn_memops_t* b, CUdeviceptr addr, uint64_t value, int kind) {
  CUstreamBatchMemOpParams* op = &b->ops[b->n++];
  memset(op, 0, sizeof(*op));
  if (kind != MPN_MEMOP_WRITE) {
    op->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    op->waitValue.address = addr;
    op->waitValue.value64 = value;
    op->waitValue.flags = kind == MPN_MEMOP_WAIT_EQ ? CU_STREAM_WAIT_VALUE_EQ : CU_STREAM_WAIT_VALUE_GEQ;
  } else {
    op->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op->writeValue.address = addr;
    op->writeValue.value64 = value;
  }
  return b->n == MPN_MEMOPS_MAX ? mpn_memops_flush(b) : ncclSuccess;
}
