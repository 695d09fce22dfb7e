// copy.cu - the batched copy kernel.  Each copy gets kBlocksPerCopy blocks
// that stride over it (copy_range.cuh).
#include "cuda/copy.h"

#include <stdint.h>

#include "cuda/copy_range.cuh"

namespace {

constexpr int kBlocksPerCopy = 8;
constexpr int kThreads = 256;

// The table travels as the kernel's argument: a few copies go to a kernel
// with a small table, whose launch costs the host less.
template <int N>
struct batch_t {
  int n;
  mpn_copy_t c[N];
};

template <int N>
__global__ void copy_batch(const batch_t<N> b) {
  const int which = blockIdx.x / kBlocksPerCopy;
  if (which >= b.n) return;
  mpn_copy_t c = b.c[which];
  if (c.limit) {
    const unsigned long long limit = *(volatile const unsigned long long*)c.limit;
    if (limit < c.bytes) c.bytes = (size_t)limit;
  }
  if (c.size_out && blockIdx.x % kBlocksPerCopy == 0 && threadIdx.x == 0)
    *(volatile unsigned long long*)c.size_out = c.bytes;
  const size_t first = (size_t)(blockIdx.x % kBlocksPerCopy) * kThreads + threadIdx.x;
  mpn::copy_range(c.src, c.dst, c.bytes, first, (size_t)kBlocksPerCopy * kThreads);
}

template <int N>
cudaError_t launch(const mpn_copy_t* copies, int n, cudaStream_t stream) {
  batch_t<N> b;
  b.n = n;
  for (int i = 0; i < n; i++) b.c[i] = copies[i];
  copy_batch<N><<<n * kBlocksPerCopy, kThreads, 0, stream>>>(b);
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t mpn_copy_batch_launch(const mpn_copy_t* copies, int n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > MPN_COPY_BATCH) return cudaErrorInvalidValue;
  return n <= 4 ? launch<4>(copies, n, stream) : launch<MPN_COPY_BATCH>(copies, n, stream);
}
