// apply.cu - lands one-sided puts received in host mirrors in the windows.
// Each block reads the descriptors of the launch into shared memory (at most
// kMaxPuts; more are taken in later rounds), then every block strides over
// every put's bytes, 16 at a time where alignment allows.
#include "cuda/apply.h"

namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 64;
constexpr int kMaxPuts = 256;

struct args_t {
  uint64_t wins;
  uint64_t error;
  int n;
  mpn_apply_range_t r[MPN_APPLY_RANGES];
};

struct put_t {
  const unsigned char* src;
  unsigned char* dst;
  uint64_t bytes;
};

// A plain store: the word is host memory, where atomics may not reach.
__device__ void fail(const args_t& a, int code) { *(volatile int*)(uintptr_t)a.error = code; }

// The index-th put of the launch (in range order), or one of no bytes.
__device__ put_t load(const args_t& a, uint64_t index) {
  put_t p = {nullptr, nullptr, 0};
  for (int i = 0; i < a.n; i++) {
    if (index >= a.r[i].n) {
      index -= a.r[i].n;
      continue;
    }
    const uint64_t count = a.r[i].first + index;
    const uint64_t len = a.r[i].len ? a.r[i].len : MPN_APPLY_RING;
    const mpn_apply_desc_t* d = (const mpn_apply_desc_t*)a.r[i].ring + (count - 1) % len;
    const uint64_t seen = __ldcv(&d->count), bytes = __ldcv(&d->bytes), offset = __ldcv(&d->offset);
    const uint32_t slot = __ldcv(&d->slot), lost = __ldcv(&d->lost);
    if (seen != count) {
      fail(a, MPN_APPLY_OVERRUN);
      return p;
    }
    if (lost) {
      fail(a, MPN_APPLY_LOST);
      return p;
    }
    if (slot == MPN_APPLY_NO_WINDOW || bytes == 0) return p;
    if (slot >= MPN_APPLY_WINDOWS) {
      fail(a, MPN_APPLY_OVERRUN);
      return p;
    }
    const mpn_apply_win_t* w = (const mpn_apply_win_t*)a.wins + slot;
    const uint64_t size = __ldcv(&w->bytes);
    if (offset > size || bytes > size - offset) {
      fail(a, MPN_APPLY_OVERRUN);
      return p;
    }
    p.src = (const unsigned char*)(uintptr_t)(__ldcv(&w->mirror) + offset);
    p.dst = (unsigned char*)(uintptr_t)(__ldcv(&w->base) + offset);
    p.bytes = bytes;
    return p;
  }
  return p;
}

__global__ void apply(const args_t a) {
  __shared__ put_t puts[kMaxPuts];
  uint64_t total = 0;
  for (int i = 0; i < a.n; i++) total += a.r[i].n;
  for (uint64_t base = 0; base < total; base += kMaxPuts) {
    const uint64_t here = total - base < kMaxPuts ? total - base : kMaxPuts;
    __syncthreads();
    for (uint64_t k = threadIdx.x; k < here; k += blockDim.x) {
      puts[k] = load(a, base + k);
    }
    __syncthreads();
    const uint64_t first = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t k = 0; k < here; k++) {
      const put_t p = puts[k];
      const uintptr_t s = (uintptr_t)p.src, d = (uintptr_t)p.dst;
      // Host memory written by UCX since earlier launches: loads that
      // do not keep it in the caches (.cv).
      if (((s | d | p.bytes) & 15) == 0) {
        const uint4* src = (const uint4*)p.src;
        uint4* dst = (uint4*)p.dst;
        for (uint64_t i = first; i < p.bytes / 16; i += stride) dst[i] = __ldcv(src + i);
      } else {
        for (uint64_t i = first; i < p.bytes; i += stride) p.dst[i] = __ldcv(p.src + i);
      }
    }
  }
}

}  // namespace

extern "C" int mpn_apply_kernels(const void** out) {
  out[0] = (const void*)apply;
  return 1;
}

extern "C" cudaError_t mpn_apply_launch(uint64_t wins, const mpn_apply_range_t* ranges, int n,
                                        uint64_t error, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > MPN_APPLY_RANGES) return cudaErrorInvalidValue;
  args_t a;
  a.wins = wins;
  a.error = error;
  a.n = n;
  for (int i = 0; i < n; i++) a.r[i] = ranges[i];
  void* args[] = {&a}; /* the launch's own result, not an older error of the thread */
  return cudaLaunchKernel((const void*)apply, dim3(kBlocks), dim3(kThreads), args, 0, stream);
}
