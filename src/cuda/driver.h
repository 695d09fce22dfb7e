/*
 * driver.h - the CUDA driver calls the data path needs (stream memory
 * operations, allocation ranges, buffer ids), reached through the runtime's
 * entry-point query so that the library loads without libcuda at link time.
 */
#ifndef MPN_CUDA_DRIVER_H_
#define MPN_CUDA_DRIVER_H_

#include <cuda.h>

#include "nccl.h"

typedef struct {
  CUresult (*stream_wait_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  CUresult (*stream_write_value64)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  CUresult (*stream_batch_mem_op)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr);
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*get_error_string)(CUresult, const char**);
  CUresult (*device_get)(CUdevice*, int);
  CUresult (*device_get_attribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_get_id)(CUcontext, unsigned long long*);
} mpn_driver_t;

/** The driver table, loaded once; ncclUnhandledCudaError if an entry is missing. */
ncclResult_t mpn_driver_get(const mpn_driver_t** out);

/** Whether stream memory operations on device dev (a runtime ordinal) may
 *  wait with CU_STREAM_WAIT_VALUE_NOR (MPN_MEMOP_WAIT_NOR); asked once per
 *  device. */
int mpn_driver_wait_nor(int dev);

/** Logs a failed driver call and returns ncclUnhandledCudaError. */
ncclResult_t mpn_driver_error(CUresult res, const char* expr);

#define MPN_CU_CHECK(drv, call) \
  do { \
    CUresult mpn_cu_ = (drv)->call; \
    if (mpn_cu_ != CUDA_SUCCESS) return mpn_driver_error(mpn_cu_, #call); \
  } while (0)

#endif /* MPN_CUDA_DRIVER_H_ */
