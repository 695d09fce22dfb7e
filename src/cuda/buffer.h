/*
 * buffer.h - whether a buffer a call names is memory the GPU reaches, and
 * long enough for the bytes the call moves: the check every path makes
 * before a copy reads or writes it (a CUDA IPC export checks its own).
 */
#ifndef MPN_CUDA_BUFFER_H_
#define MPN_CUDA_BUFFER_H_

#include <stddef.h>

#include "nccl.h"

struct ncclComm;

/**
 * Checks that ptr names device, managed or pinned host memory that the GPU
 * reaches at that address, and that ptr + bytes stays inside its
 * allocation.  fn and name word the refusal ("ncclSend: sendbuff 0x... +
 * N bytes runs past the end of its allocation (...)"); capturing: the
 * call's stream is capturing a CUDA graph, whose own allocations CUDA may
 * not know yet (such a pointer passes).  Memory-pool allocations are
 * checked for reach only where the range CUDA reports is shorter than the
 * message.  One driver query on the common path, none when bytes is 0.
 * Returns ncclInvalidArgument with the text set on comm.
 */
ncclResult_t mpn_cuda_buffer_check(struct ncclComm* comm, const char* fn, const char* name, const void* ptr,
                                   size_t bytes, int capturing);

#endif /* MPN_CUDA_BUFFER_H_ */
