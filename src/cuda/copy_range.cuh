// copy_range.cuh - the loop both copy kernels run (copy.cu, sync.cu): one
// copy strided over the calling threads.  A copy kernel is bound by memory
// latency, not bandwidth: with one load in flight a thread moves one word per
// round trip (one 512-thread block: 8 KiB per round trip, some 10 GB/s), so
// each thread keeps kUnroll loads in flight.  Words are the widest that
// source and destination share an alignment for; the bytes before the first
// aligned word and after the last go one by one.
#ifndef MPN_CUDA_COPY_RANGE_CUH_
#define MPN_CUDA_COPY_RANGE_CUH_

#include <stddef.h>
#include <stdint.h>
#include <vector_types.h>

// Device code in the kernels; host code too, for the unit test that runs
// each thread's share in turn (tests/unit/test_copy_range.cc).
#ifdef __CUDACC__
#define MPN_HD __host__ __device__
#define MPN_UNROLL _Pragma("unroll")
#else
#define MPN_HD
#define MPN_UNROLL
#endif

namespace mpn {

constexpr int kUnroll = 8;

// Words [0, n) of src to dst, word i by thread first + k * stride: each
// step loads up to kUnroll words (all of them before any store), then stores.
template <typename W>
MPN_HD inline void copy_words(const W* src, W* dst, size_t n, size_t first, size_t stride) {
  for (size_t i = first; i < n; i += kUnroll * stride) {
    W v[kUnroll];
    MPN_UNROLL
    for (int u = 0; u < kUnroll; u++)
      if (i + u * stride < n) v[u] = src[i + u * stride];
    MPN_UNROLL
    for (int u = 0; u < kUnroll; u++)
      if (i + u * stride < n) dst[i + u * stride] = v[u];
  }
}

// Bytes one by one up to src's first W-aligned byte (dst's too: they share
// the alignment), W words, then the rest one by one.
template <typename W>
MPN_HD inline void copy_in_words(const unsigned char* src, unsigned char* dst, size_t bytes, size_t first,
                                     size_t stride) {
  size_t head = (sizeof(W) - ((uintptr_t)src & (sizeof(W) - 1))) & (sizeof(W) - 1);
  if (head > bytes) head = bytes;
  size_t n = (bytes - head) / sizeof(W), tail = head + n * sizeof(W);
  for (size_t i = first; i < head; i += stride) dst[i] = src[i];
  copy_words<W>((const W*)(src + head), (W*)(dst + head), n, first, stride);
  for (size_t i = tail + first; i < bytes; i += stride) dst[i] = src[i];
}

MPN_HD inline void copy_range(const void* from, void* to, size_t bytes, size_t first, size_t stride) {
  const unsigned char* src = (const unsigned char*)from;
  unsigned char* dst = (unsigned char*)to;
  const uintptr_t apart = (uintptr_t)src ^ (uintptr_t)dst;
  if ((apart & 15) == 0) copy_in_words<uint4>(src, dst, bytes, first, stride);
  else if ((apart & 7) == 0) copy_in_words<unsigned long long>(src, dst, bytes, first, stride);
  else if ((apart & 3) == 0) copy_in_words<unsigned int>(src, dst, bytes, first, stride);
  else if ((apart & 1) == 0) copy_in_words<unsigned short>(src, dst, bytes, first, stride);
  else copy_words<unsigned char>(src, dst, bytes, first, stride);
}

}  // namespace mpn

#endif  // MPN_CUDA_COPY_RANGE_CUH_
