/*
 * copies.c - batching a stream's copies into kernel launches.
 */
#include "cuda/copies.h"

#include "core/error.h"
#include "core/param.h"

void mpn_copies_init(mpn_copies_t* c, cudaStream_t stream) {
  c->n = c->nthen = 0;
  c->kernel_max = (size_t)mpn_param_int(MPN_PARAM_COPY_KERNEL_MAX);
  c->stream = stream;
}

ncclResult_t mpn_copies_flush(mpn_copies_t* c) {
  int n = c->n, nthen = c->nthen;
  c->n = c->nthen = 0; /* a failed batch is not launched again by the next flush */
  if (n) MPN_TRACE(MPN_SUBSYS_P2P | MPN_SUBSYS_RMA, "stream %p: copy kernel of %d copies", (void*)c->stream, n);
  if (n) MPN_CUDA_CHECK(mpn_copy_batch_launch(c->batch, nthen ? c->then : NULL, n, c->stream));
  return ncclSuccess;
}

ncclResult_t mpn_copies_add(mpn_copies_t* c, void* dst, const void* src, size_t bytes, int reach) {
  if (bytes == 0) return ncclSuccess;
  if (bytes > c->kernel_max || !reach) {
    MPN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream));
    return ncclSuccess;
  }
  return mpn_copies_add_kernel(c, &(mpn_copy_t){src, dst, bytes, NULL, NULL});
}

ncclResult_t mpn_copies_add_kernel(mpn_copies_t* c, const mpn_copy_t* copy) {
  return mpn_copies_add_then(c, copy, NULL);
}

ncclResult_t mpn_copies_add_then(mpn_copies_t* c, const mpn_copy_t* copy, const mpn_copy_then_t* then) {
  c->then[c->n] = then ? *then : (mpn_copy_then_t){NULL, 0, NULL};
  c->batch[c->n++] = *copy;
  c->nthen += then != NULL;
  return c->n == MPN_COPY_BATCH || c->nthen == MPN_COPY_THENS ? mpn_copies_flush(c) : ncclSuccess;
}
