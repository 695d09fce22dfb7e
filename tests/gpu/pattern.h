/*
 * pattern.h - device-side fill and check of test buffers: byte i of a
 * message holds a value derived from (seed, i), so a misplaced, short or
 * stale transfer is detected at every byte.
 */
#ifndef MPN_TESTS_PATTERN_H_
#define MPN_TESTS_PATTERN_H_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Fills bytes at buf with the pattern of seed, on stream. */
void pattern_fill(void* buf, size_t bytes, uint32_t seed, cudaStream_t stream);

/** Keeps stream's GPU busy for about us microseconds (one thread; no
 * other rank is polled): work that puts a GPU behind its host. */
void gpu_busy(unsigned us, cudaStream_t stream);

/** Number of bytes at buf that differ from the pattern of seed (synchronizes stream). */
unsigned long long pattern_check(const void* buf, size_t bytes, uint32_t seed, cudaStream_t stream);

/** Forgets the calling thread's counters of pattern_check (after a
 * cudaDeviceReset, which freed them). */
void pattern_forget(void);

#ifdef __cplusplus
}
#endif

#endif
