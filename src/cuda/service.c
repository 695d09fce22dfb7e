/*
 * service.c - the devices' service streams (service.h): made once per
 * process and device, under one lock, and kept until a reset of the device
 * is found (core/renew.h), which forgets the stream so that the next use
 * makes a new one.
 */
#include "cuda/service.h"

#include <pthread.h>

#include "core/debug.h"
#include "cuda/device.h"

#define SERVICE_DEVICES 64

static cudaStream_t streams[SERVICE_DEVICES];
static pthread_mutex_t service_lock = PTHREAD_MUTEX_INITIALIZER;

cudaStream_t mpn_cuda_service_stream(int dev) {
  if (dev < 0 || dev >= SERVICE_DEVICES) return NULL;
  cudaStream_t s = __atomic_load_n(&streams[dev], __ATOMIC_ACQUIRE);
  if (s) return s;
  pthread_mutex_lock(&service_lock);
  s = streams[dev];
  if (s == NULL) {
    mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
    cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    mpn_cuda_relaxed_leave(mode);
    if (err != cudaSuccess) {
      cudaGetLastError();
      MPN_WARN("device %d: no service stream: %s", dev, cudaGetErrorString(err));
      s = NULL;
    }
    __atomic_store_n(&streams[dev], s, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&service_lock);
  return s;
}

void mpn_cuda_service_make(int dev) { (void)mpn_cuda_service_stream(dev); }

void mpn_cuda_service_forget(int dev) {
  if (dev < 0 || dev >= SERVICE_DEVICES) return;
  pthread_mutex_lock(&service_lock);
  __atomic_store_n(&streams[dev], NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&service_lock);
}

cudaError_t mpn_cuda_alloc_zeroed(size_t bytes, size_t zero_bytes, void** out) {
  int dev = mpn_cuda_current_device();
  cudaStream_t s = mpn_cuda_service_stream(dev);
  if (s == NULL) return cudaErrorInvalidResourceHandle; /* (the failed creation was logged) */
  void* d = NULL;
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  cudaError_t err = cudaMalloc(&d, bytes);
  if (err == cudaSuccess) err = cudaMemsetAsync(d, 0, zero_bytes, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  mpn_cuda_relaxed_leave(mode);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (d) mpn_cuda_forget(cudaFree(d));
    return err;
  }
  *out = d;
  return cudaSuccess;
}
