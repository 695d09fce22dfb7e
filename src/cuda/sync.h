/*
 * sync.h - a stream's flag work and small copies as one kernel, for ranks
 * whose kernels run at the same time (MPS, or different GPUs): the kernel
 * writes the flags that go first, polls the ones it waits for, moves the
 * data, and writes the flags that say so.  Stream memory operations do the
 * same in three or more stream items, each paying the GPU's hand-over from
 * one kind of work to the next; under MPS those hand-overs dominate small
 * exchanges.  Never used where ranks time-slice one GPU: a polling kernel
 * would hold the GPU while the rank it waits for cannot run.
 * Behind a C API so that the library's C code can call it.
 */
#ifndef MPN_CUDA_SYNC_H_
#define MPN_CUDA_SYNC_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/copy.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One flag operation: write value, or wait until the flag is >= / == value. */
typedef struct {
  uint64_t addr; /* device address of the 64-bit flag */
  uint64_t value;
  uint32_t kind; /* MPN_MEMOP_WRITE, MPN_MEMOP_WAIT_GEQ or MPN_MEMOP_WAIT_EQ */
  uint32_t pad;
} mpn_sync_flag_t;

/*
 * Fewest waits for which the kernel pays (MPINCCL_KERNEL_SYNC_WAITS, default
 * 3): it saves a hand-over per wait that stream memory operations would take
 * one after the other, but costs more than one wait batch (MPS, GPU machine:
 * signal barrier of 8 ranks 19.6 us with the kernel, 126 us without; a put
 * ping-pong with one wait 8.8 us with it, 5.9 us without).
 */

/** Flags and copies of one launch; the table travels as the kernel's argument. */
#define MPN_SYNC_FLAGS 96
#define MPN_SYNC_COPIES 32

typedef struct {
  int nfirst, nwait, ncopy, nlast;
  mpn_sync_flag_t flags[MPN_SYNC_FLAGS]; /* first writes, then waits, then last writes */
  mpn_copy_t copies[MPN_SYNC_COPIES];
} mpn_sync_t;

/** Enqueues s as one kernel on stream: first writes, waits, copies, last writes. */
cudaError_t mpn_sync_launch(const mpn_sync_t* s, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MPN_CUDA_SYNC_H_ */
