/*
 * syncs.h - issuing a flag-and-copy table (sync.h) on a stream: the kernel,
 * or the same work as stream memory operations and copies when the kernel
 * cannot be launched.
 */
#ifndef MPN_CUDA_SYNCS_H_
#define MPN_CUDA_SYNCS_H_

#include <cuda_runtime.h>

#include "cuda/driver.h"
#include "cuda/sync.h"
#include "nccl.h"

/**
 * Enqueues k on s: its flags are written and waited for in every case.
 * Where the kernel could not be launched, its counters go back to the pool
 * and k->grid.blocks becomes 1: what k->grid names afterwards, the launch
 * holds.
 */
ncclResult_t mpn_sync_issue(const mpn_driver_t* drv, mpn_sync_t* k, cudaStream_t s);

#endif /* MPN_CUDA_SYNCS_H_ */
