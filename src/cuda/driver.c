/*
 * driver.c - loads the driver entry points of driver.h once per process.
 */
#include "cuda/driver.h"

#include <cuda_runtime.h>
#include <pthread.h>

#include "core/error.h"
#include "cuda/device.h"

static mpn_driver_t table;
static ncclResult_t table_status;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static int load(const char* name, void** fn) {
  enum cudaDriverEntryPointQueryResult found;
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || *fn == NULL) {
    mpn_cuda_forget(err); /* (a symbol not found is no runtime error) */
    mpn_error_set(NULL, ncclUnhandledCudaError, "the CUDA driver lacks %s", name);
    return -1;
  }
  return 0;
}

static void table_load(void) {
  int bad = 0;
  bad |= load("cuStreamWaitValue64", (void**)&table.stream_wait_value64);
  bad |= load("cuStreamWriteValue64", (void**)&table.stream_write_value64);
  bad |= load("cuStreamBatchMemOp", (void**)&table.stream_batch_mem_op);
  bad |= load("cuMemGetAddressRange", (void**)&table.mem_get_address_range);
  bad |= load("cuPointerGetAttribute", (void**)&table.pointer_get_attribute);
  bad |= load("cuGetErrorString", (void**)&table.get_error_string);
  bad |= load("cuDeviceGet", (void**)&table.device_get);
  bad |= load("cuDeviceGetAttribute", (void**)&table.device_get_attribute);
  bad |= load("cuCtxGetCurrent", (void**)&table.ctx_get_current);
  bad |= load("cuCtxGetId", (void**)&table.ctx_get_id);
  table_status = bad ? ncclUnhandledCudaError : ncclSuccess;
}

ncclResult_t mpn_driver_get(const mpn_driver_t** out) {
  pthread_once(&table_once, table_load);
  if (table_status != ncclSuccess) return table_status;
  *out = &table;
  return ncclSuccess;
}

int mpn_driver_wait_nor(int dev) {
  enum { DEVICES = 64 };
  static int known[DEVICES]; /* 0 not asked yet, 1 no, 2 yes */
  if (dev < 0) return 0;
  int got = dev < DEVICES ? __atomic_load_n(&known[dev], __ATOMIC_RELAXED) : 0;
  if (got) return got == 2;
  const mpn_driver_t* drv;
  CUdevice d;
  int nor = 0;
  if (mpn_driver_get(&drv) != ncclSuccess || drv->device_get(&d, dev) != CUDA_SUCCESS ||
      drv->device_get_attribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, d) != CUDA_SUCCESS)
    nor = 0;
  if (dev < DEVICES) __atomic_store_n(&known[dev], nor ? 2 : 1, __ATOMIC_RELAXED);
  return nor != 0;
}

ncclResult_t mpn_driver_error(CUresult res, const char* expr) {
  const char* msg = "unknown error";
  if (table.get_error_string) table.get_error_string(res, &msg);
  ncclResult_t r = mpn_error_set(NULL, ncclUnhandledCudaError, "%s failed: %s (%d)", expr, msg, (int)res);
  MPN_WARN("%s", mpn_error_last(NULL));
  return r;
}
