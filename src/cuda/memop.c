/*
 * memop.c - batches of stream memory operations.
 */
#include "cuda/memop.h"

#include <stdio.h>
#include <string.h>

#include "core/debug.h"
#include "core/error.h"

void mpn_memops_init(mpn_memops_t* b, const mpn_driver_t* drv, cudaStream_t stream) {
  b->n = 0;
  b->drv = drv;
  b->stream = (CUstream)stream;
}

/* NCCL_DEBUG=TRACE with subsystem P2P or RMA: each batch, one line, as
 * "W addr=value" (write) and "G addr>=value" / "E addr==value" /
 * "N addr~value" (waits). */
static void trace_batch(const mpn_memops_t* b, unsigned n) {
  char text[2048];
  size_t at = 0;
  for (unsigned i = 0; i < n && at + 48 < sizeof(text); i++) {
    const CUstreamBatchMemOpParams* op = &b->ops[i];
    if (op->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64)
      at += (size_t)snprintf(text + at, sizeof(text) - at, " W %llx=%llu", (unsigned long long)op->writeValue.address,
                             (unsigned long long)op->writeValue.value64);
    else {
      unsigned f = op->waitValue.flags;
      const char* how = f == CU_STREAM_WAIT_VALUE_EQ ? "E" : f == CU_STREAM_WAIT_VALUE_NOR ? "N" : "G";
      const char* op_text = f == CU_STREAM_WAIT_VALUE_EQ ? "==" : f == CU_STREAM_WAIT_VALUE_NOR ? "~" : ">=";
      at += (size_t)snprintf(text + at, sizeof(text) - at, " %s %llx%s%llu", how,
                             (unsigned long long)op->waitValue.address, op_text,
                             (unsigned long long)op->waitValue.value64);
    }
  }
  mpn_log(MPN_LOG_TRACE, MPN_SUBSYS_P2P | MPN_SUBSYS_RMA, __FILE__, __LINE__,
          "stream %p: %u memory operations in one batch:%s%s", (void*)b->stream, n, text,
          at + 48 >= sizeof(text) ? " ..." : "");
}

ncclResult_t mpn_memops_flush(mpn_memops_t* b) {
  const mpn_driver_t* drv = b->drv;
  unsigned n = b->n;
  b->n = 0; /* a failed batch is not issued again by the next flush */
  if (n && mpn_log_enabled(MPN_LOG_TRACE, MPN_SUBSYS_P2P | MPN_SUBSYS_RMA)) trace_batch(b, n);
  if (n) MPN_CU_CHECK(drv, stream_batch_mem_op(b->stream, n, b->ops, 0));
  return ncclSuccess;
}

ncclResult_t mpn_memops_add(mpn_memops_t* b, CUdeviceptr addr, uint64_t value, int kind) {
  if (kind == MPN_MEMOP_WAIT_GEQ_CLEAR) {
    MPN_CHECK(mpn_memops_add(b, addr, value, MPN_MEMOP_WAIT_GEQ));
    return mpn_memops_add(b, addr, 0, MPN_MEMOP_WRITE);
  }
  CUstreamBatchMemOpParams* op = &b->ops[b->n++];
  memset(op, 0, sizeof(*op));
  if (kind != MPN_MEMOP_WRITE) {
    op->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    op->waitValue.address = addr;
    op->waitValue.value64 = value;
    op->waitValue.flags = kind == MPN_MEMOP_WAIT_EQ    ? CU_STREAM_WAIT_VALUE_EQ
                          : kind == MPN_MEMOP_WAIT_NOR ? CU_STREAM_WAIT_VALUE_NOR
                                                       : CU_STREAM_WAIT_VALUE_GEQ;
  } else {
    op->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op->writeValue.address = addr;
    op->writeValue.value64 = value;
  }
  return b->n == MPN_MEMOPS_MAX ? mpn_memops_flush(b) : ncclSuccess;
}
