// copy.cu - the batched copy kernel.  Each copy gets the same number of
// blocks, as many as the largest needs for one step of the copy loop
// (copy_range.cuh) and at most kBlocksPerCopy: small copies (8 bytes, a
// face of a few KiB) take one block each, not a grid that has nothing to do.
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
  int n, blocks; /* copies, blocks per copy */
  mpn_copy_t c[N];
  mpn_copy_then_t then[MPN_COPY_THENS < N ? MPN_COPY_THENS : N];
  signed char then_of[N]; /* index in then, or -1 */
};

template <int N>
__global__ void copy_batch(const batch_t<N> b) {
  const int which = blockIdx.x / b.blocks;
  if (which >= b.n) return;
  mpn_copy_t c = b.c[which];
  c.bytes = mpn_copy_bytes(c);
  if (c.size_out && blockIdx.x % b.blocks == 0 && threadIdx.x == 0)
    *(volatile unsigned long long*)c.size_out = c.bytes;
  const size_t first = (size_t)(blockIdx.x % b.blocks) * kThreads + threadIdx.x;
  mpn::copy_range(c.src, c.dst, c.bytes, first, (size_t)b.blocks * kThreads);
  if (b.then_of[which] < 0) return;
  const mpn_copy_then_t t = b.then[b.then_of[which]];
  __syncthreads(); /* every read of this block is done */
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(t.arrivals, 1u) != (unsigned)b.blocks - 1) return;
  *(volatile unsigned*)t.arrivals = 0; /* the last block: ready for the next use */
  __threadfence_system();
  *(volatile unsigned long long*)t.word = t.value;
}

// Blocks per copy: one step of the copy loop (kUnroll 16-byte words per
// thread) over the largest copy, at most kBlocksPerCopy.
int blocks_per_copy(const mpn_copy_t* copies, int n) {
  const size_t step = (size_t)kThreads * 16 * mpn::kUnroll;
  size_t largest = 0;
  for (int i = 0; i < n; i++)
    if (copies[i].bytes > largest) largest = copies[i].bytes;
  size_t blocks = (largest + step - 1) / step;
  return blocks < 1 ? 1 : blocks > (size_t)kBlocksPerCopy ? kBlocksPerCopy : (int)blocks;
}

template <int N>
cudaError_t launch(const mpn_copy_t* copies, const mpn_copy_then_t* thens, int n, cudaStream_t stream) {
  batch_t<N> b;
  const int most = (int)(sizeof(b.then) / sizeof(b.then[0]));
  int nthen = 0;
  b.n = n;
  b.blocks = blocks_per_copy(copies, n);
  for (int i = 0; i < n; i++) {
    b.c[i] = copies[i];
    b.then_of[i] = -1;
    if (!thens || !thens[i].word) continue;
    if (nthen == most) return cudaErrorInvalidValue;
    b.then_of[i] = (signed char)nthen;
    b.then[nthen++] = thens[i];
  }
  void* args[] = {&b}; /* the launch's own result, not an older error of the thread */
  return cudaLaunchKernel((const void*)copy_batch<N>, dim3(n * b.blocks), dim3(kThreads), args, 0, stream);
}

}  // namespace

extern "C" int mpn_copy_kernels(const void** out) {
  out[0] = (const void*)copy_batch<4>;
  out[1] = (const void*)copy_batch<MPN_COPY_BATCH>;
  return 2;
}

extern "C" cudaError_t mpn_copy_batch_launch(const mpn_copy_t* copies, const mpn_copy_then_t* thens, int n,
                                             cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > MPN_COPY_BATCH) return cudaErrorInvalidValue;
  return n <= 4 ? launch<4>(copies, thens, n, stream) : launch<MPN_COPY_BATCH>(copies, thens, n, stream);
}
