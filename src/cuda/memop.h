/*
 * memop.h - stream memory operations (64-bit flag writes and waits)
 * collected into one cuStreamBatchMemOp call per batch.
 */
#ifndef MPN_CUDA_MEMOP_H_
#define MPN_CUDA_MEMOP_H_

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/driver.h"
#include "nccl.h"

#include "cuda/flagop.h"

/** Operations one batch holds (one cuStreamBatchMemOp call). */
#define MPN_MEMOPS_MAX 128

typedef struct {
  CUstreamBatchMemOpParams ops[MPN_MEMOPS_MAX];
  unsigned n;
  CUdeviceptr clears[MPN_MEMOPS_MAX]; /* flags waited for (MPN_MEMOP_WAIT_EQ_CLEAR), to be put back to 0 */
  unsigned nclear;
  const mpn_driver_t* drv;
  CUstream stream;
} mpn_memops_t;

/** An empty batch for stream. */
void mpn_memops_init(mpn_memops_t* b, const mpn_driver_t* drv, cudaStream_t stream);

/**
 * Adds a write of value to addr or a wait for it (MPN_MEMOP_*); a full batch
 * is issued.  The writes of MPN_MEMOP_WAIT_EQ_CLEAR's zeros wait until the
 * next write or flush, so that the waits before them come one after the
 * other: each write fences, and a batch of N such waits that each put
 * their flag back at once paid N fences between its waits.
 */
ncclResult_t mpn_memops_add(mpn_memops_t* b, CUdeviceptr addr, uint64_t value, int kind);

/** Issues what the batch holds; the operations run in the order added. */
ncclResult_t mpn_memops_flush(mpn_memops_t* b);

#endif /* MPN_CUDA_MEMOP_H_ */
