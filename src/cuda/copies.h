/*
 * copies.h - the copies one rank enqueues on one stream in a launch: those
 * of at most MPINCCL_COPY_KERNEL_MAX bytes that the stream's GPU reaches
 * (its own memory, or a peer GPU's it maps) go through one
 * kernel launch per MPN_COPY_BATCH of them (DESIGN rule 4), the others each
 * through the copy engine.
 */
#ifndef MPN_CUDA_COPIES_H_
#define MPN_CUDA_COPIES_H_

#include <cuda_runtime.h>
#include <stddef.h>

#include "cuda/copy.h"
#include "nccl.h"

typedef struct {
  mpn_copy_t batch[MPN_COPY_BATCH];
  mpn_copy_then_t then[MPN_COPY_BATCH]; /* what each copy does afterwards (mpn_copies_add_then) */
  int n, nthen;
  size_t kernel_max;
  cudaStream_t stream;
} mpn_copies_t;

/** No copies yet on stream. */
void mpn_copies_init(mpn_copies_t* c, cudaStream_t stream);

/** Adds one copy; reach: the stream's GPU reaches both buffers (the kernel may take it). */
ncclResult_t mpn_copies_add(mpn_copies_t* c, void* dst, const void* src, size_t bytes, int reach);

/**
 * Adds one copy that the kernel must do whatever its size: one whose size
 * word (limit, size_out) is read or written on the GPU.  Both buffers on
 * the stream's GPU.
 */
ncclResult_t mpn_copies_add_kernel(mpn_copies_t* c, const mpn_copy_t* copy);

/**
 * Adds one copy as mpn_copies_add_kernel does, after which the kernel does
 * then (a word written once the copy is done; NULL: nothing).
 */
ncclResult_t mpn_copies_add_then(mpn_copies_t* c, const mpn_copy_t* copy, const mpn_copy_then_t* then);

/** Launches the batched copies still held. */
ncclResult_t mpn_copies_flush(mpn_copies_t* c);

#endif /* MPN_CUDA_COPIES_H_ */
