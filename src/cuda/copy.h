/*
 * copy.h - one kernel launch that performs many device-to-device copies
 * (DESIGN rule 4: a group's small messages cost one launch, not one copy
 * each).  Behind a C API so that the library's C code can call it.
 */
#ifndef MPN_CUDA_COPY_H_
#define MPN_CUDA_COPY_H_

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One copy.  Eager messages (p2p/eager.h) go through a peer's inbox whose
 * size word travels with the data: the sender's copy stores the byte count
 * in *size_out, and the receiver's copy moves at most *limit bytes, so a
 * receive never takes more than was sent.  Both are optional (NULL).
 */
typedef struct {
  const void* src;
  void* dst;
  size_t bytes;
  const unsigned long long* limit; /**< device address of a byte count, or NULL */
  unsigned long long* size_out;    /**< device address that receives bytes, or NULL */
} mpn_copy_t;

/*
 * What the batched copy kernel does once every block of a copy is done with
 * it: *word = value (a receive's inbox slot freed, read by a host: no stream
 * operation of its own).  arrivals counts the copy's blocks; it is zero
 * between uses.
 */
typedef struct {
  unsigned long long* word; /**< host-visible word, or NULL: nothing */
  unsigned long long value;
  unsigned int* arrivals; /**< device counter */
} mpn_copy_then_t;

/** Copies per launch; the table travels as the kernel's argument. */
#define MPN_COPY_BATCH 64
/** Copies with something to do afterwards (mpn_copy_then_t) per launch. */
#define MPN_COPY_THENS 16

/** Sets out[] (room for 2) to the copy kernels; returns their number (kernels.c). */
int mpn_copy_kernels(const void** out);

/**
 * Enqueues n (<= MPN_COPY_BATCH) copies on stream as one kernel; thens
 * (NULL, or one per copy) says what each does afterwards, at most
 * MPN_COPY_THENS of them something.
 */
cudaError_t mpn_copy_batch_launch(const mpn_copy_t* copies, const mpn_copy_then_t* thens, int n,
                                  cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
/** Bytes c moves: c.bytes, or fewer where its limit word says so. */
static __device__ inline size_t mpn_copy_bytes(const mpn_copy_t& c) {
  if (!c.limit) return c.bytes;
  const unsigned long long limit = *(volatile const unsigned long long*)c.limit;
  return limit < c.bytes ? (size_t)limit : c.bytes;
}
#endif

#endif /* MPN_CUDA_COPY_H_ */
