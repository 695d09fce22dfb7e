/*
 * bench_kernels.cu - pattern fill and check kernels of the benchmark.  Each
 * byte depends on the message's key and on its offset, so a message that
 * lands in the wrong place, or a stale one, is seen as well as a lost one.
 */
#include "bench_kernels.h"

/* splitmix64's finalizer: every input bit affects every output bit. */
static __device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* In [1, 255]: never the 0 the receive buffers are cleared to. */
static __device__ __forceinline__ unsigned char pattern_byte(uint64_t key, size_t i) {
  return (unsigned char)(1 + mix64(key * 0x9e3779b97f4a7c15ULL ^ (uint64_t)i) % 255);
}

static __global__ void fill_kernel(unsigned char* buf, size_t bytes, uint64_t key) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes;
       i += (size_t)gridDim.x * blockDim.x)
    buf[i] = pattern_byte(key, i);
}

static __global__ void check_kernel(const unsigned char* buf, size_t bytes, uint64_t key,
                                    unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes;
       i += (size_t)gridDim.x * blockDim.x)
    mine += buf[i] != pattern_byte(key, i);
  if (mine) atomicAdd(wrong, mine);
}

static __global__ void nonzero_kernel(const unsigned char* buf, size_t bytes, unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes; i += (size_t)gridDim.x * blockDim.x)
    mine += buf[i] != 0;
  if (mine) atomicAdd(wrong, mine);
}

/* Enough blocks to fill an H100/H200 a few times over, no more. */
static unsigned grid_for(size_t bytes) {
  size_t blocks = (bytes + 255) / 256;
  return (unsigned)(blocks < 1024 ? (blocks ? blocks : 1) : 1024);
}

extern "C" cudaError_t bench_pattern_fill(void* buf, size_t bytes, uint64_t key,
                                          cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  fill_kernel<<<grid_for(bytes), 256, 0, stream>>>((unsigned char*)buf, bytes, key);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_pattern_check(const void* buf, size_t bytes, uint64_t key,
                                           unsigned long long* wrong, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  check_kernel<<<grid_for(bytes), 256, 0, stream>>>((const unsigned char*)buf, bytes, key, wrong);
  return cudaGetLastError();
}

extern "C" cudaError_t bench_nonzero_count(const void* buf, size_t bytes, unsigned long long* wrong,
                                           cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  nonzero_kernel<<<grid_for(bytes), 256, 0, stream>>>((const unsigned char*)buf, bytes, wrong);
  return cudaGetLastError();
}
