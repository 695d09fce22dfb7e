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
  const mpn_driver_t* drv;
  CUstream stream;
} mpn_memops_t;

/** An empty batch for stream. */
void mpn_memops_init(mpn_memops_t* b, const mpn_driver_t* drv, cudaStream_t stream);

/** Adds a write of value to addr or a wait for it (MPN_MEMOP_*); a full batch is issued. */
ncclResult_t mpn_memops_add(mpn_memops_t* b, CUdeviceptr addr, uint64_t value, int kind);

/** Issues what the batch holds; the operations run in the order added. */
ncclResult_t mpn_memops_flush(mpn_memops_t* b);

#endif /* MPN_CUDA_MEMOP_H_ */
