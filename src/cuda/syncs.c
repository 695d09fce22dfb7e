/*
 * syncs.c - a flag-and-copy table issued as the kernel (sync.cu), or, when
 * the kernel cannot be launched, as the same operations in the same order
 * with stream memory operations and copies: every flag the table names is
 * still written, so no peer waits for one that never comes.
 */
#include "cuda/syncs.h"

#include "core/error.h"
#include "cuda/copies.h"
#include "cuda/memop.h"

/* Flags [from, to) of k as one batch. */
static ncclResult_t flags_as_memops(const mpn_driver_t* drv, const mpn_sync_t* k, int from, int to,
                                    cudaStream_t s) {
  mpn_memops_t b;
  mpn_memops_init(&b, drv, s);
  ncclResult_t first = ncclSuccess, res;
  for (int i = from; i < to; i++)
    if ((res = mpn_memops_add(&b, (CUdeviceptr)k->flags[i].addr, k->flags[i].value, (int)k->flags[i].kind)) !=
            ncclSuccess &&
        first == ncclSuccess)
      first = res;
  res = mpn_memops_flush(&b);
  return first != ncclSuccess ? first : res;
}

ncclResult_t mpn_sync_issue(const mpn_driver_t* drv, const mpn_sync_t* k, cudaStream_t s) {
  cudaError_t err = mpn_sync_launch(k, s);
  if (err == cudaSuccess) return ncclSuccess;
  cudaGetLastError();
  MPN_WARN("the flag kernel could not be launched (%s): stream memory operations instead",
           cudaGetErrorString(err));
  int waits = k->nfirst + k->nwait;
  ncclResult_t first = flags_as_memops(drv, k, 0, waits, s), res;
  mpn_copies_t copies;
  mpn_copies_init(&copies, s);
  for (int i = 0; i < k->ncopy; i++)
    if ((res = mpn_copies_add(&copies, k->copies[i].dst, k->copies[i].src, k->copies[i].bytes, 1)) !=
            ncclSuccess &&
        first == ncclSuccess)
      first = res;
  if ((res = mpn_copies_flush(&copies)) != ncclSuccess && first == ncclSuccess) first = res;
  if ((res = flags_as_memops(drv, k, waits, waits + k->nlast, s)) != ncclSuccess && first == ncclSuccess)
    first = res;
  return first;
}
