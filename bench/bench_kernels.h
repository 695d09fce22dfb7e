/*
 * bench_kernels.h - the benchmark's data pattern behind a C launch API: fill
 * a message with bytes derived from a key, and count the bytes of a received
 * message that differ from them, and those written outside any message.  Launches are asynchronous on the stream.
 */
#ifndef BENCH_KERNELS_H_
#define BENCH_KERNELS_H_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Fills bytes [0, bytes) of buf with the pattern of key.  Pattern bytes are
 * never 0, so a receive buffer cleared to 0 shows every byte that did not
 * arrive.
 */
cudaError_t bench_pattern_fill(void* buf, size_t bytes, uint64_t key, cudaStream_t stream);

/**
 * Adds to *wrong (device memory) the number of bytes of buf that differ from
 * the pattern of key.
 */
cudaError_t bench_pattern_check(const void* buf, size_t bytes, uint64_t key,
                                unsigned long long* wrong, cudaStream_t stream);

/**
 * Adds to *wrong (device memory) the number of bytes of buf that are not 0:
 * what landed outside the messages of a receive buffer cleared to 0.
 */
cudaError_t bench_nonzero_count(const void* buf, size_t bytes, unsigned long long* wrong, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* BENCH_KERNELS_H_ */
