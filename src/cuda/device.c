/*
 * device.c - CUDA runtime queries behind device.h.
 */
#include "cuda/device.h"

#include <cuda_runtime.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cuda/driver.h"

int mpn_cuda_device_count(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    MPN_INFO(MPN_SUBSYS_INIT, "no CUDA device: %s", cudaGetErrorString(err));
    cudaGetLastError();
    return 0;
  }
  return n;
}

int mpn_cuda_current_device(void) {
  if (mpn_cuda_device_count() == 0) return -1;
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return dev;
}

ncclResult_t mpn_cuda_set_device(int dev) {
  cudaError_t err = cudaSetDevice(dev);
  if (err == cudaSuccess) return ncclSuccess;
  char what[32]; /* (made only on failure: launches switch devices for every message) */
  snprintf(what, sizeof(what), "cudaSetDevice(%d)", dev);
  return mpn_cuda_result(NULL, err, what);
}

ncclResult_t mpn_cuda_result(struct ncclComm* comm, cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ncclSuccess;
  mpn_cuda_forget(err);
  ncclResult_t res = mpn_error_set(comm, ncclUnhandledCudaError, "%s failed: %s", what, cudaGetErrorString(err));
  MPN_WARN("%s", mpn_error_last(comm));
  return res;
}

cudaError_t mpn_cuda_host_mapped(size_t bytes, void** host, CUdeviceptr* dev) {
  void* d = NULL;
  *host = NULL;
  cudaError_t err = cudaHostAlloc(host, bytes, cudaHostAllocPortable | cudaHostAllocMapped);
  if (err == cudaSuccess) {
    memset(*host, 0, bytes);
    err = cudaHostGetDevicePointer(&d, *host, 0);
  }
  if (err != cudaSuccess && *host) {
    mpn_cuda_forget(cudaFreeHost(*host));
    *host = NULL;
  }
  *dev = (CUdeviceptr)d;
  return err;
}

void mpn_cuda_context_start(int dev) {
  int current = -1;
  cudaError_t err = cudaGetDevice(&current);
  if (err == cudaSuccess && current == dev) err = cudaFree(NULL);
  mpn_cuda_forget(err); /* a device that fails here fails again, reported, in its creation */
}

unsigned long long mpn_cuda_context_id(void) {
  const mpn_driver_t* drv;
  CUcontext ctx = NULL;
  unsigned long long id = 0;
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter(); /* (another thread may be capturing) */
  cudaError_t err = cudaFree(NULL);
  if (err != cudaSuccess || mpn_driver_get(&drv) != ncclSuccess || drv->ctx_get_current(&ctx) != CUDA_SUCCESS ||
      ctx == NULL || drv->ctx_get_id(ctx, &id) != CUDA_SUCCESS)
    id = 0;
  mpn_cuda_forget(err);
  mpn_cuda_relaxed_leave(mode);
  return id;
}

ncclResult_t mpn_cuda_device_info(int dev, mpn_cuda_info_t* out) {
  struct cudaDeviceProp prop;
  mpn_cuda_info_t info;
  memset(&info, 0, sizeof(info));
  MPN_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  memcpy(info.uuid, prop.uuid.bytes, sizeof(info.uuid));
  info.cc = prop.major * 10 + prop.minor;
  MPN_CHECK(mpn_cuda_bus_id(dev, info.pci_bus));
  int mps = 0;
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, dev) != cudaSuccess) {
    cudaGetLastError();
    mps = 0;
  }
  info.mps = mps != 0;
  *out = info;
  return ncclSuccess;
}

ncclResult_t mpn_cuda_bus_id(int dev, char bus[16]) {
  MPN_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, 16, dev));
  for (char* p = bus; *p; p++) *p = (char)tolower((unsigned char)*p);
  return ncclSuccess;
}

int mpn_cuda_peer_capable(int a, int b) {
  int ab = 0, ba = 0;
  if (cudaDeviceCanAccessPeer(&ab, a, b) != cudaSuccess || cudaDeviceCanAccessPeer(&ba, b, a) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return ab && ba;
}

ncclResult_t mpn_cuda_peer_enable(int dev, int peer) {
  int saved = mpn_cuda_current_device();
  MPN_CHECK(mpn_cuda_set_device(dev));
  cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    err = cudaSuccess;
  }
  if (saved >= 0) mpn_cuda_forget(cudaSetDevice(saved));
  char what[64];
  snprintf(what, sizeof(what), "cudaDeviceEnablePeerAccess(%d) on device %d", peer, dev);
  return mpn_cuda_result(NULL, err, what);
}

unsigned long long mpn_cuda_stream_id(cudaStream_t s) {
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  unsigned long long id = 0;
  cudaError_t err = cudaStreamGetId(s, &id);
  mpn_cuda_relaxed_leave(mode);
  if (err == cudaSuccess && mode.set) return id; /* (relaxed: the query left the capture alone) */
  /* (a refused exchange was forgotten by mpn_cuda_relaxed_enter) */
  mpn_cuda_forget(err);
  return err == cudaSuccess ? id : (unsigned long long)(uintptr_t)s | (1ULL << 63);
}

/* A user object's payload: fn is called only once the graph holds it. */
typedef struct {
  void (*fn)(void*);
  void* arg;
  int armed;
} on_destroy_t;

static void on_destroy(void* p) {
  on_destroy_t* d = p;
  if (d->armed) d->fn(d->arg);
  free(d);
}

ncclResult_t mpn_cuda_capture_on_destroy(cudaStream_t s, void (*fn)(void*), void* arg) {
  on_destroy_t* d = malloc(sizeof(*d));
  if (d == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  *d = (on_destroy_t){fn, arg, 0};
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
  cudaUserObject_t obj = NULL;
  cudaError_t err = cudaStreamGetCaptureInfo(s, &status, NULL, &graph, NULL, NULL, NULL);
  int ours = err == cudaSuccess && (status != cudaStreamCaptureStatusActive || graph == NULL);
  if (ours) err = cudaErrorStreamCaptureUnmatched; /* (not in CUDA's last error: nothing to clear) */
  if (err == cudaSuccess) err = cudaUserObjectCreate(&obj, d, on_destroy, 1, cudaUserObjectNoDestructorSync);
  if (err == cudaSuccess) {
    d->armed = 1; /* the graph's from now on; unarmed, a failed hand-over only frees d */
    err = cudaGraphRetainUserObject(graph, obj, 1, cudaGraphUserObjectMove);
    if (err != cudaSuccess) {
      d->armed = 0;
      mpn_cuda_forget(cudaUserObjectRelease(obj, 1));
    }
  } else {
    free(d);
  }
  mpn_cuda_relaxed_leave(mode);
  if (ours)
    return mpn_error_set(NULL, ncclUnhandledCudaError, "a user object for stream %p: it is not capturing", (void*)s);
  return mpn_cuda_result(NULL, err, "a user object for the graph being captured");
}
