/*
 * syncs.c - a flag-and-copy table issued as the kernel (sync.cu), or, when
 * the kernel cannot be launched, as the same operations in the same order
 * with stream memory operations and copies: every flag the table names is
 * still written, so no peer waits for one that never comes.
 */
#include "cuda/syncs.h"

#include "core/error.h"
#include "core/param.h"
#include "cuda/copies.h"
#include "cuda/memop.h"

/* How flags_as_memops issues a clearing wait (MPN_MEMOP_WAIT_GEQ_CLEAR). */
enum {
  AS_IS,       /* every flag as its kind says */
  WAIT_ONLY,   /* a clearing wait only waits: its clear comes after the round's copies */
  CLEARS_ONLY, /* only the clears of the clearing waits, as writes of 0 */
};

/* Flags [from, to) of k as one batch.  As in the kernel, the clears of a
 * round's clearing waits come after its copies: a receiver's copy out of
 * a graph slot's inbox must be done before the clear lets its sender write
 * the slot again. */
static ncclResult_t flags_as_memops(const mpn_driver_t* drv, const mpn_sync_t* k, int from, int to, int how,
                                    cudaStream_t s) {
  mpn_memops_t b;
  mpn_memops_init(&b, drv, s);
  ncclResult_t first = ncclSuccess;
  for (int i = from; i < to; i++) {
    const mpn_sync_flag_t* f = &k->flags[i];
    int clearing = f->kind == MPN_MEMOP_WAIT_GEQ_CLEAR;
    if (how == CLEARS_ONLY && clearing)
      mpn_keep(&first, mpn_memops_add(&b, (CUdeviceptr)f->addr, 0, MPN_MEMOP_WRITE));
    else if (how != CLEARS_ONLY)
      mpn_keep(&first, mpn_memops_add(&b, (CUdeviceptr)f->addr, f->value,
                                      how == WAIT_ONLY && clearing ? MPN_MEMOP_WAIT_GEQ : (int)f->kind));
  }
  mpn_keep(&first, mpn_memops_flush(&b));
  return first;
}

/* The copies [from, to) of k, those with a size word through the kernel. */
static ncclResult_t copies_as_launches(const mpn_sync_t* k, int from, int to, cudaStream_t s) {
  mpn_copies_t copies;
  mpn_copies_init(&copies, s);
  ncclResult_t first = ncclSuccess;
  for (int i = from; i < to; i++) {
    const mpn_copy_t* c = &k->copies[i];
    mpn_keep(&first, c->limit || c->size_out ? mpn_copies_add_kernel(&copies, c)
                                             : mpn_copies_add(&copies, c->dst, c->src, c->bytes, 1));
  }
  mpn_keep(&first, mpn_copies_flush(&copies));
  return first;
}

/* Copies [from, to) could not be enqueued: the size words they would have
 * stored (eager sends into an inbox) become 0, so that a receiver copies
 * nothing rather than the slot's previous message (k->copies_lost tells the
 * caller, which says so on both sides). */
static ncclResult_t size_words_cleared(const mpn_driver_t* drv, const mpn_sync_t* k, int from, int to, cudaStream_t s) {
  mpn_memops_t b;
  mpn_memops_init(&b, drv, s);
  ncclResult_t first = ncclSuccess;
  for (int i = from; i < to; i++)
    if (k->copies[i].size_out)
      mpn_keep(&first, mpn_memops_add(&b, (CUdeviceptr)(uintptr_t)k->copies[i].size_out, 0, MPN_MEMOP_WRITE));
  mpn_keep(&first, mpn_memops_flush(&b));
  return first;
}

ncclResult_t mpn_sync_issue(const mpn_driver_t* drv, mpn_sync_t* k, cudaStream_t s) {
  MPN_TRACE(MPN_SUBSYS_P2P | MPN_SUBSYS_RMA, "stream %p: flag kernel of %d flags, %d copies, %d blocks", (void*)s,
            mpn_sync_nflags(k), mpn_sync_ncopies(k), k->grid.blocks);
  cudaError_t err = mpn_sync_launch(k, !k->captured && mpn_param_int(MPN_PARAM_KERNEL_SYNC_EARLY) > 0, s);
  if (err == cudaSuccess) return ncclSuccess; /* (a failure is not in CUDA's last error: sync.h) */
  mpn_sync_grid_release(k);
  k->grid.blocks = 1;
  MPN_WARN("the flag kernel could not be launched (%s): stream memory operations instead",
           cudaGetErrorString(err));
  ncclResult_t first = ncclSuccess;
  int flag = 0, copy = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    int writes_before = r == 0 ? k->nfirst : 0; /* the first writes go with round 0's waits */
    int waits = writes_before + k->nwait[r];
    mpn_keep(&first, flags_as_memops(drv, k, flag, flag + waits, WAIT_ONLY, s));
    ncclResult_t copied = copies_as_launches(k, copy, copy + k->ncopy[r], s);
    mpn_keep(&first, copied);
    if (copied != ncclSuccess) {
      k->copies_lost = 1; /* the caller tells both sides of the messages */
      mpn_keep(&first, size_words_cleared(drv, k, copy, copy + k->ncopy[r], s));
    }
    copy += k->ncopy[r];
    mpn_keep(&first, flags_as_memops(drv, k, flag, flag + waits, CLEARS_ONLY, s));
    flag += waits;
    mpn_keep(&first, flags_as_memops(drv, k, flag, flag + k->nlast[r], AS_IS, s));
    flag += k->nlast[r];
  }
  if (k->mark) {
    mpn_memops_t b;
    mpn_memops_init(&b, drv, s);
    mpn_keep(&first, mpn_memops_add(&b, (CUdeviceptr)k->mark, k->mark_value, MPN_MEMOP_WRITE));
    mpn_keep(&first, mpn_memops_flush(&b));
  }
  return first;
}
