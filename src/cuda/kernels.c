/*
 * kernels.c - loads the library's kernels when a communicator is created.
 * CUDA loads a kernel lazily by default (CUDA_MODULE_LOADING), at its first
 * launch, and loading may wait for the work in flight in the context.
 * Between ranks of one process that work can be a stream memory wait for
 * a flag that this very launch is to write: the first put or send of a
 * process hung so (three ranks of one process, one thread each).  Loaded
 * at creation, before any of the communicator's work is enqueued, nothing
 * waits.  Each creation asks again (a loaded kernel costs nothing): a
 * context made anew after cudaDeviceReset starts with none.
 *
 * The load comes at the end of the creation (mpn_init_job_run), after the
 * communicator's set-up, followed by a barrier of its ranks.  Loaded before
 * the set-up, the copy kernel made the 8-byte put ping-pong under MPS take
 * 8.0-8.8 us one way on the H200 against 5.0-5.9 us when it loaded at its
 * first launch or after the set-up (why is not known; docs/RMA.md).
 */
#include "cuda/kernels.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>

#include "core/debug.h"
#include "cuda/apply.h"
#include "cuda/copy.h"
#include "cuda/device.h"
#include "cuda/sync.h"

#define MOST_KERNELS 8

typedef CUresult (*func_load_t)(CUfunction);

static func_load_t func_load;
static pthread_once_t func_load_once = PTHREAD_ONCE_INIT;

/* cuFuncLoad (CUDA 12.4) finishes a lazy load; without it a kernel may be
 * loaded at cudaFuncGetAttributes, or only at its first launch. */
static void func_load_find(void) {
  void* fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  cudaError_t err = cudaGetDriverEntryPointByVersion("cuFuncLoad", &fn, 12040, cudaEnableDefault, &found);
  if (err == cudaSuccess && found == cudaDriverEntryPointSuccess) {
    func_load = (func_load_t)fn;
    return;
  }
  mpn_cuda_forget(err);
  MPN_WARN(
      "the CUDA driver lacks cuFuncLoad (CUDA 12.4): kernels may load at their first launch, which can hang "
      "ranks of one process; set CUDA_MODULE_LOADING=EAGER");
}

/* The runtime's failures are forgotten here: cuFuncLoad's, reported as
 * cudaErrorInvalidDeviceFunction, left the runtime nothing to clear. */
static cudaError_t kernel_load(const void* kernel) {
  cudaError_t err;
  if (func_load == NULL) {
    struct cudaFuncAttributes attr;
    err = cudaFuncGetAttributes(&attr, kernel);
    mpn_cuda_forget(err);
    return err;
  }
  cudaFunction_t f = NULL;
  err = cudaGetFuncBySymbol(&f, kernel);
  mpn_cuda_forget(err);
  if (err == cudaSuccess && func_load((CUfunction)f) != CUDA_SUCCESS) err = cudaErrorInvalidDeviceFunction;
  return err;
}

void mpn_cuda_kernels_load(int dev) {
  pthread_once(&func_load_once, func_load_find);
  const void* kernels[MOST_KERNELS];
  int n = mpn_copy_kernels(kernels);
  n += mpn_sync_kernels(kernels + n);
  n += mpn_apply_kernels(kernels + n);
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < n && err == cudaSuccess; i++) err = kernel_load(kernels[i]);
  if (err != cudaSuccess) {
    MPN_WARN("loading the library's kernels on device %d failed: %s", dev, cudaGetErrorString(err));
  } else {
    MPN_TRACE(MPN_SUBSYS_INIT, "device %d: %d kernels loaded", dev, n);
  }
  mpn_sync_early_check();
}
