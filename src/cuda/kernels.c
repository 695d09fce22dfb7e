/*
 * kernels.c - loads the library's kernels when a communicator is created.
 * CUDA loads a kernel lazily by default (CUDA_MODULE_LOADING), at its first
 * launch, and loading may wait for the work in flight in the context.
 * Between ranks of one process that work can be a stream memory wait for
 * a flag that this very launch is to write: the first put or send of a
 * process hung so (three ranks of one process, one thread each).  Loaded
 * here, before any of the communicator's work is enqueued, nothing waits.
 */
#include "cuda/kernels.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>

#include "core/debug.h"
#include "cuda/apply.h"
#include "cuda/copy.h"
#include "cuda/sync.h"

#define KNOWN_DEVICES 64
#define MOST_KERNELS 8

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char loaded[KNOWN_DEVICES];

typedef CUresult (*func_load_t)(CUfunction);

/* cuFuncLoad (CUDA 12.4) finishes a lazy load; an older driver loads at
 * cudaFuncGetAttributes, if at all. */
static func_load_t func_load(void) {
  void* fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  if (cudaGetDriverEntryPointByVersion("cuFuncLoad", &fn, 12040, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return NULL;
  }
  return (func_load_t)fn;
}

static cudaError_t kernel_load(const void* kernel, func_load_t load) {
  struct cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
  cudaFunction_t f = NULL;
  if (err == cudaSuccess && load) err = cudaGetFuncBySymbol(&f, kernel);
  if (err == cudaSuccess && load && load((CUfunction)f) != CUDA_SUCCESS) err = cudaErrorInvalidDeviceFunction;
  return err;
}

void mpn_cuda_kernels_load(int dev) {
  pthread_mutex_lock(&load_lock);
  if (dev < 0 || dev >= KNOWN_DEVICES || !loaded[dev]) {
    const void* kernels[MOST_KERNELS];
    int n = mpn_copy_kernels(kernels);
    n += mpn_sync_kernels(kernels + n);
    n += mpn_apply_kernels(kernels + n);
    func_load_t load = func_load();
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < n && err == cudaSuccess; i++) err = kernel_load(kernels[i], load);
    if (err != cudaSuccess) {
      cudaGetLastError();
      MPN_WARN("loading the library's kernels on device %d failed: %s", dev, cudaGetErrorString(err));
    } else {
      MPN_INFO(MPN_SUBSYS_INIT, "device %d: %d kernels loaded%s", dev, n, load ? "" : " (no cuFuncLoad)");
      if (dev >= 0 && dev < KNOWN_DEVICES) loaded[dev] = 1;
    }
  }
  pthread_mutex_unlock(&load_lock);
}
