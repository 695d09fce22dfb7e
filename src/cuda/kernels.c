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

#include <cuda_runtime.h>
#include <pthread.h>

#include "core/debug.h"
#include "cuda/apply.h"
#include "cuda/copy.h"
#include "cuda/sync.h"

#define KNOWN_DEVICES 64

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char loaded[KNOWN_DEVICES];

void mpn_cuda_kernels_load(int dev) {
  pthread_mutex_lock(&load_lock);
  int done = dev >= 0 && dev < KNOWN_DEVICES && loaded[dev];
  if (!done) {
    cudaError_t err = mpn_copy_kernels_load();
    if (err == cudaSuccess) err = mpn_sync_kernels_load();
    if (err == cudaSuccess) err = mpn_apply_kernel_load();
    if (err != cudaSuccess) {
      cudaGetLastError();
      MPN_WARN("loading the library's kernels on device %d failed: %s", dev, cudaGetErrorString(err));
    } else if (dev >= 0 && dev < KNOWN_DEVICES) {
      loaded[dev] = 1;
    }
  }
  pthread_mutex_unlock(&load_lock);
}
