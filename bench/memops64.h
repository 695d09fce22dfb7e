/*
 * memops64.h - the 64-bit stream memory operations (cuStreamWriteValue64,
 * cuStreamWaitValue64) for the plain-CUDA measurements of bench/ (floors,
 * protocols), found through the runtime so that nothing links libcuda.
 */
#ifndef MPN_BENCH_MEMOPS64_H_
#define MPN_BENCH_MEMOPS64_H_

#include <cuda.h> /* types and constants only */
#include <cuda_runtime.h>

#if CUDART_VERSION < 12050
#error "bench/memops64.h needs CUDA 12.5 or later (cudaGetDriverEntryPointByVersion)"
#endif

typedef CUresult (*memop64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

/** Finds both entry points; 1 when the driver has them, else 0 (and the
 * thread's CUDA error is cleared). */
static inline int bench_memops64_load(memop64_fn* write64, memop64_fn* wait64) {
  enum cudaDriverEntryPointQueryResult q1, q2;
  cudaError_t e1 = cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", (void**)write64, 12000,
                                                    cudaEnableDefault, &q1);
  cudaError_t e2 = cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", (void**)wait64, 12000,
                                                    cudaEnableDefault, &q2);
  int ok = e1 == cudaSuccess && e2 == cudaSuccess && q1 == cudaDriverEntryPointSuccess &&
           q2 == cudaDriverEntryPointSuccess && *write64 && *wait64;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

typedef CUresult (*batch_memop_fn)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);

/** Finds cuStreamBatchMemOp; 1 when the driver has it, else 0 (and the
 * thread's CUDA error is cleared). */
static inline int bench_batch_memop_load(batch_memop_fn* batch) {
  enum cudaDriverEntryPointQueryResult q;
  cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", (void**)batch, 12000, cudaEnableDefault, &q);
  int ok = e == cudaSuccess && q == cudaDriverEntryPointSuccess && *batch;
  if (!ok) (void)cudaGetLastError();
  return ok;
}

#endif /* MPN_BENCH_MEMOPS64_H_ */
