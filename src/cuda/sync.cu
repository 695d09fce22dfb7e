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
  size_t bytes = c.bytes;
  if (c.limit) {
    const unsigned long long limit = *(volatile const unsigned long long*)c.limit;
    if (limit < bytes) bytes = (size_t)limit;
  }
  if (c.size_out && threadIdx.x == 0) *(volatile unsigned long long*)c.size_out = bytes;
  const uintptr_t s = (uintptr_t)c.src, d = (uintptr_t)c.dst;
  if (((s | d | bytes) & 15) == 0) {
    const uint4* src = (const uint4*)c.src;
    uint4* dst = (uint4*)c.dst;
    for (size_t i = threadIdx.x; i < bytes / 16; i += kThreads) dst[i] = src[i];
  } else {
    const unsigned char* src = (const unsigned char*)c.src;
    unsigned char* dst = (unsigned char*)c.dst;
    for (size_t i = threadIdx.x; i < bytes; i += kThreads) dst[i] = src[i];
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
  int flag = s.nfirst, copy = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    if (s.nwait[r] + s.ncopy[r] + s.nlast[r] == 0) continue;
    // Each poller fences before the barrier: what the peers wrote before
    // their flags is seen by every thread's copies after it.
    if (t < s.nwait[r]) flag_wait(s.flags[flag + t]);
    flag += s.nwait[r];
    __threadfence_system();
    __syncthreads();
    for (int i = 0; i < s.ncopy[r]; i++) copy_one(s.copies[copy + i]);
    copy += s.ncopy[r];
    __threadfence_system();
    __syncthreads();
    // Every thread's copies (and size words) are fenced before the barrier;
    // the writers fence again before they write, so the peers see the data
    // before the flags.
    if (t < s.nlast[r]) {
      __threadfence_system();
      flag_write(s.flags[flag + t]);
    }
    flag += s.nlast[r];
  }
}

}  // namespace

extern "C" cudaError_t mpn_sync_launch(const mpn_sync_t* s, cudaStream_t stream) {
  int flags = s->nfirst, copies = 0, bad = s->nfirst < 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    bad |= s->nwait[r] < 0 || s->ncopy[r] < 0 || s->nlast[r] < 0;
    flags += s->nwait[r] + s->nlast[r];
    copies += s->ncopy[r];
  }
  if (bad || flags > MPN_SYNC_FLAGS || copies > MPN_SYNC_COPIES) return cudaErrorInvalidValue;
  sync_kernel<<<1, kThreads, 0, stream>>>(*s);
  return cudaGetLastError();
}
