/*
 * memory.h - the windows' hold on ncclMemAlloc memory: an ncclMemFree of
 * memory that backs a live window is deferred until the last window over
 * it is let go, since peers may still put into it (see memory.c).
 */
#ifndef MPN_CUDA_MEMORY_H_
#define MPN_CUDA_MEMORY_H_

#include "nccl.h"

struct ncclComm;

/** An ncclMemAlloc allocation, as a window holds it (opaque). */
typedef struct mpn_mem_alloc mpn_mem_alloc_t;

/**
 * Counts one more window on the ncclMemAlloc allocation that holds buff
 * (the window's part on this rank, which the caller has checked lies in
 * one CUDA allocation, at any offset) and sets *out to it; *out is NULL
 * for other memory (plain cudaMalloc), which has nothing to defer.
 * Refuses, with ncclInvalidArgument and a message naming caller, buff and
 * the allocation (set on comm too), an allocation that ncclMemFree already
 * freed: its memory goes with its last window.  A record whose memory went
 * with a reset of its device (any device, current or not: the driver names
 * the context of the allocation at its base) holds nothing.
 */
ncclResult_t mpn_mem_pin(struct ncclComm* comm, const char* caller, const void* buff, mpn_mem_alloc_t** out);

/**
 * Counts one window fewer on a (NULL: nothing); when it was the last and
 * ncclMemFree came meanwhile, frees the memory now.  The caller must be
 * done with the memory, and so must the peers that put into it.
 */
void mpn_mem_unpin(mpn_mem_alloc_t* a);

/**
 * Marks the ncclMemAlloc records of device dev made in another context
 * than ctx (mpn_cuda_context_id) gone: the program reset the device since,
 * and their memory went with the old context.  Their ncclMemFree then
 * frees nothing through CUDA (a new allocation may have the address), and
 * no new window is counted on them.
 */
void mpn_mem_forget(int dev, unsigned long long ctx);

#endif /* MPN_CUDA_MEMORY_H_ */
