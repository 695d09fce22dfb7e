/*
 * buffer.h - whether a buffer a call names is memory the GPU reaches, and
 * long enough for the bytes the call moves: the check every path makes
 * before a copy reads or writes it (a CUDA IPC export checks its own).
 */
#ifndef MPN_CUDA_BUFFER_H_
#define MPN_CUDA_BUFFER_H_

#include <stddef.h>

#include "cuda/driver.h"
#include "nccl.h"

struct ncclComm;

/** mpn_cuda_buffer_check's flags. */
enum {
  MPN_BUFFER_CAPTURING = 1, /**< the call's stream captures a CUDA graph, whose own allocations CUDA may not
                                 know yet: such a pointer passes */
  MPN_BUFFER_HOST_OK = 2    /**< memory CUDA does not know (pageable host memory) passes: the path copies it
                                 with cudaMemcpyAsync (staging for UCX), not with our kernels */
};

/** Whether ptr is device memory of CUDA's virtual memory API (cuMemCreate
 *  and cuMemMap): not managed, from no memory pool, and not shareable
 *  through legacy CUDA IPC (cudaIpcGetMemHandle). */
int mpn_cuda_is_vmm(const mpn_driver_t* drv, CUdeviceptr ptr);

/**
 * Checks that ptr + bytes stays inside the allocation CUDA knows ptr in
 * (for memory of CUDA's virtual memory API, inside the mappings placed
 * back to back from it),
 * and that ptr is device, managed or pinned host memory the GPU reaches at
 * that address (unless flags has MPN_BUFFER_HOST_OK).  fn and name word
 * the refusal ("ncclSend: sendbuff 0x... + N bytes runs past the end of its
 * allocation (...)").  Memory-pool allocations are not judged by a range
 * shorter than the message (it may be the pool's mapping, not the
 * allocation).  One driver query on the common path, none when bytes is 0.
 * Returns ncclInvalidArgument with the text set on comm.
 */
ncclResult_t mpn_cuda_buffer_check(struct ncclComm* comm, const char* fn, const char* name, const void* ptr,
                                   size_t bytes, int flags);

#endif /* MPN_CUDA_BUFFER_H_ */
