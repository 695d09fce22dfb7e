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
  /* Batched copy kernel only (the flag kernel writes its own flags): once
   * every block of the copy is done with it, *then = then_value (a receive's
   * inbox slot freed, read by a host: no stream operation of its own).
   * arrivals counts the blocks; it is zero between uses. */
  unsigned long long* then; /**< host-visible word, or NULL */
  unsigned long long then_value;
  unsigned int* arrivals; /**< device counter, with then */
} mpn_copy_t;

/** Copies per launch; the table travels as the kernel's argument. */
#define MPN_COPY_BATCH 64

/** Enqueues n (<= MPN_COPY_BATCH) copies on stream as one kernel. */
cudaError_t mpn_copy_batch_launch(const mpn_copy_t* copies, int n, cudaStream_t stream);

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
