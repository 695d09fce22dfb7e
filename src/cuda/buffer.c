/*
 * buffer.c - the extent and reach of a buffer a send, receive or put names
 * (buffer.h).  A copy past the end of an allocation reads or writes another
 * allocation, or faults and loses the context; an address the GPU cannot
 * reach (pageable host memory) faults in our copy kernel.
 */
#include "cuda/buffer.h"

#include <cuda.h>
#include <stdint.h>

#include "core/error.h"
#include "cuda/driver.h"

/* Pinned host memory that the GPU reaches at the same address (UVA), or
 * managed memory; 0 for memory CUDA does not know. */
static int host_reachable(const mpn_driver_t* drv, const void* ptr) {
  unsigned int type = 0;
  CUdeviceptr dev = 0;
  if (drv->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)ptr) != CUDA_SUCCESS) return 0;
  if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED) return 1;
  return type == CU_MEMORYTYPE_HOST &&
         drv->pointer_get_attribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)ptr) == CUDA_SUCCESS &&
         dev == (CUdeviceptr)ptr;
}

/* A memory-pool allocation: the range CUDA gives may be the pool's mapping
 * and not the allocation, so it is not judged by it (the IPC path stages
 * such buffers and does not judge them either). */
static int from_pool(const mpn_driver_t* drv, const void* ptr) {
  CUmemoryPool pool = NULL;
  return drv->pointer_get_attribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)ptr) == CUDA_SUCCESS &&
         pool != NULL;
}

int mpn_cuda_is_vmm(const mpn_driver_t* drv, CUdeviceptr ptr) {
  unsigned int type = 0, managed = 1;
  int legacy = 1;
  return drv->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) == CUDA_SUCCESS &&
         type == CU_MEMORYTYPE_DEVICE &&
         drv->pointer_get_attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr) == CUDA_SUCCESS && !managed &&
         drv->pointer_get_attribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr) == CUDA_SUCCESS &&
         !legacy && !from_pool(drv, (const void*)ptr);
}

/* Extends [*base, *base + *size) over the virtual-memory mappings placed
 * right after it, while it ends before end (at most MPN_BUFFER_MAPPINGS
 * of them): a program may map several allocations back to back and use
 * them as one buffer (PyTorch's expandable segments do).  Only such
 * mappings: two cudaMalloc allocations that happen to be adjacent are not
 * one buffer, and a copy running from one into the other is the caller's
 * error, refused. */
enum { MPN_BUFFER_MAPPINGS = 4096 };
static void vmm_extend(const mpn_driver_t* drv, CUdeviceptr* base, size_t* size, uintptr_t end) {
  if (!mpn_cuda_is_vmm(drv, *base)) return;
  for (int hops = 0; hops < MPN_BUFFER_MAPPINGS && (uintptr_t)*base + *size < end; hops++) {
    CUdeviceptr next = *base + *size, b = 0;
    size_t n = 0;
    if (drv->mem_get_address_range(&b, &n, next) != CUDA_SUCCESS || b != next || !mpn_cuda_is_vmm(drv, next)) return;
    *size += n;
  }
}

ncclResult_t mpn_cuda_buffer_check(struct ncclComm* comm, const char* fn, const char* name, const void* ptr,
                                   size_t bytes, int flags) {
  if (bytes == 0) return ncclSuccess;
  const mpn_driver_t* drv;
  MPN_CHECK(mpn_driver_get(&drv));
  CUdeviceptr base = 0;
  size_t size = 0;
  if (drv->mem_get_address_range(&base, &size, (CUdeviceptr)ptr) == CUDA_SUCCESS) {
    uintptr_t at = (uintptr_t)ptr;
    if (bytes <= size - (at - (uintptr_t)base) || from_pool(drv, ptr)) return ncclSuccess;
    vmm_extend(drv, &base, &size, at + bytes); /* (past the first mapping only: rare) */
    if (bytes <= size - (at - (uintptr_t)base)) return ncclSuccess;
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: %s %p + %zu bytes runs past the end of its allocation (%zu bytes from 0x%llx)", fn, name,
                      ptr, bytes, size, (unsigned long long)base);
  }
  if ((flags & (MPN_BUFFER_CAPTURING | MPN_BUFFER_HOST_OK)) || host_reachable(drv, ptr)) return ncclSuccess;
  return MPN_REFUSE(comm, ncclInvalidArgument,
                    "%s: %s %p is neither device memory nor pinned host memory the GPU can reach at that "
                    "address",
                    fn, name, ptr);
}
