/*
 * apply.h - one kernel that lands one-sided puts received in host memory
 * (a window's mirror, written by a peer over UCX) in the window on the
 * device, reading what to copy from the descriptors the peers put in host
 * rings (ucx/winstage.c).  It runs after the stream's wait for the signals,
 * so it never polls.  Behind a C API for the library's C code.
 */
#ifndef MPN_CUDA_APPLY_H_
#define MPN_CUDA_APPLY_H_

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Signals kept per (source rank, context) in a ring: at most this many may
 * be outstanding (signalled, not yet waited for) between two ranks. */
#define MPN_APPLY_RING 256

/** What a peer puts into the ring for each signal (32 bytes). */
typedef struct {
  uint64_t count;  /**< the signal's number (1, 2, ...) from that peer on that context */
  uint32_t slot;   /**< the window (mpn_apply_win_t index); MPN_APPLY_NO_WINDOW for a signal alone */
  uint32_t lost;   /**< nonzero: the put's data did not all go (the sender's failure); nothing to land */
  uint64_t offset; /**< where in the window */
  uint64_t bytes;
} mpn_apply_desc_t;

#define MPN_APPLY_NO_WINDOW 0xffffffffu

/** What the kernel writes into its error word (mpn_apply_launch). */
#define MPN_APPLY_OVERRUN 1 /**< a descriptor overwritten, or naming a bad window */
#define MPN_APPLY_LOST 2    /**< a put its sender marked lost */
#define MPN_APPLY_WINDOWS 64

/** A window as the kernel sees it: its mirror (host memory mapped for the GPU) and its buffer. */
typedef struct {
  uint64_t mirror;
  uint64_t base;
  uint64_t bytes;
} mpn_apply_win_t;

/** The signals count first .. first + n - 1 of one ring (device address of
 * its entry 0; count c at entry (c - 1) % len, len 0 meaning MPN_APPLY_RING). */
typedef struct {
  uint64_t ring;
  uint64_t first;
  uint32_t n;
  uint32_t len;
} mpn_apply_range_t;

/** Ranges per launch (the table is the kernel's argument). */
#define MPN_APPLY_RANGES 32

/** Sets out[0] to the kernel; returns 1 (kernels.c). */
int mpn_apply_kernels(const void** out);

/**
 * Enqueues on stream the copies of every put of the n (<= MPN_APPLY_RANGES)
 * ranges from the mirrors into the windows of wins (device address of
 * MPN_APPLY_WINDOWS entries).  A descriptor whose count is not the
 * expected one (overwritten: more than MPN_APPLY_RING signals outstanding)
 * or that names a bad window sets *error (a device address) to
 * MPN_APPLY_OVERRUN; one marked lost lands nothing and sets MPN_APPLY_LOST.
 */
cudaError_t mpn_apply_launch(uint64_t wins, const mpn_apply_range_t* ranges, int n, uint64_t error,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MPN_CUDA_APPLY_H_ */
