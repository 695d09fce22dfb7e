/*
 * host_pairs.h - stand-ins (--wrap) for the CUDA calls that map a pair
 * (src/p2p/pair.c), for unit tests that map pairs without a GPU.  Include
 * it in one source of a program linked with the matching --wrap flags
 * (Makefile.am), after defining what it needs:
 *   HOST_PAIRS_MAPPING  host memory registers and is its own device address
 *                       (cudaHostRegister, cudaHostGetDevicePointer,
 *                       cudaHostUnregister, cudaGetLastError,
 *                       cudaThreadExchangeStreamCaptureMode);
 *   HOST_PAIRS_BLOCK    a device block (MPINCCL_FLAGS=device) at the made-up
 *                       address FAKE_BLOCK, exported without a device
 *                       (mpn_cuda_alloc_zeroed, mpn_ipc_export_own).
 */
#ifndef MPN_TESTS_UNIT_HOST_PAIRS_H_
#define MPN_TESTS_UNIT_HOST_PAIRS_H_

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda/ipc.h"

#ifdef HOST_PAIRS_MAPPING
cudaError_t __wrap_cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  (void)ptr, (void)size, (void)flags;
  return cudaSuccess;
}
cudaError_t __wrap_cudaHostGetDevicePointer(void** dev, void* host, unsigned int flags) {
  (void)flags;
  *dev = host;
  return cudaSuccess;
}
cudaError_t __wrap_cudaHostUnregister(void* ptr) {
  (void)ptr;
  return cudaSuccess;
}
cudaError_t __wrap_cudaGetLastError(void) { return cudaSuccess; }
cudaError_t __wrap_cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  (void)mode;
  return cudaErrorNotSupported; /* nothing to give back */
}
#endif

#ifdef HOST_PAIRS_BLOCK
#define FAKE_BLOCK ((void*)(uintptr_t)0x7e0000000000ull)
cudaError_t __wrap_mpn_cuda_alloc_zeroed(size_t bytes, size_t zero_bytes, void** out) {
  (void)bytes, (void)zero_bytes;
  *out = FAKE_BLOCK;
  return cudaSuccess;
}
ncclResult_t __wrap_mpn_ipc_export_own(ncclComm_t comm, const char* who, const void* ptr, const char* what,
                                       mpn_ipc_desc_t* out) {
  (void)comm, (void)who, (void)ptr, (void)what;
  memset(out, 0, sizeof(*out));
  return ncclSuccess;
}
#endif

#endif /* MPN_TESTS_UNIT_HOST_PAIRS_H_ */
