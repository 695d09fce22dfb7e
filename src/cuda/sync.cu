// sync.cu - the flag-and-copy kernel (sync.h).  One block: the flags are a
// handful and the copies small, so the kernel is about latency.  Flags are
// read and written volatile, at system scope, since they live in host memory
// or in another process's view of GPU memory.
#include "cuda/sync.h"

#include "cuda/flagop.h"

namespace {

constexpr int kThreads = 512;

__device__ void flag_write(const mpn_sync_flag_t& f) {
  *(volatile unsigned long long*)f.addr = f.value;
}

__device__ void flag_wait(const mpn_sync_flag_t& f) {
  volatile unsigned long long* p = (volatile unsigned long long*)f.addr;
  if (f.kind == MPN_MEMOP_WAIT_EQ)
    while (*p != f.value) __nanosleep(100);
  else
    while (*p < f.value) __nanosleep(100);
}

__device__ void copy_one(const mpn_copy_t& c) {
  const uintptr_t s = (uintptr_t)c.src, d = (uintptr_t)c.dst;
  if (((s | d | c.bytes) & 15) == 0) {
    const uint4* src = (const uint4*)c.src;
    uint4* dst = (uint4*)c.dst;
    for (size_t i = threadIdx.x; i < c.bytes / 16; i += kThreads) dst[i] = src[i];
  } else {
    const unsigned char* src = (const unsigned char*)c.src;
    unsigned char* dst = (unsigned char*)c.dst;
    for (size_t i = threadIdx.x; i < c.bytes; i += kThreads) dst[i] = src[i];
  }
}

__global__ void sync_kernel(const mpn_sync_t s) {
  const int t = threadIdx.x;
  // Whatever the stream did before is complete; the first writes say so
  // (fenced, as a stream memory write is, after the stream's earlier work).
  if (t < s.nfirst) {
    __threadfence_system();
    flag_write(s.flags[t]);
  }
  // Each poller fences before the barrier: what the peers wrote before
  // their flags is seen by every thread's copies after it.
  if (t < s.nwait) flag_wait(s.flags[s.nfirst + t]);
  __threadfence_system();
  __syncthreads();
  for (int i = 0; i < s.ncopy; i++) copy_one(s.copies[i]);
  __threadfence_system();
  __syncthreads();
  // Every thread's copies are fenced before the barrier; the writers fence
  // again before they write, so the peers see the data before the flags.
  if (t < s.nlast) {
    __threadfence_system();
    flag_write(s.flags[s.nfirst + s.nwait + t]);
  }
}

}  // namespace

extern "C" cudaError_t mpn_sync_launch(const mpn_sync_t* s, cudaStream_t stream) {
  if (s->nfirst < 0 || s->nwait < 0 || s->nlast < 0 || s->ncopy < 0 || s->ncopy > MPN_SYNC_COPIES ||
      s->nfirst + s->nwait + s->nlast > MPN_SYNC_FLAGS)
    return cudaErrorInvalidValue;
  sync_kernel<<<1, kThreads, 0, stream>>>(*s);
  return cudaGetLastError();
}
