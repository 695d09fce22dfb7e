// sync.cu - the flag-and-copy kernel (sync.h).  One block, or more where
// the copies are large (their share of each copy goes to every block; the
// last block of a round to finish writes its flags).  Flags are
// read and written volatile; fences are at system scope unless the table says
// that everything is in this GPU's memory.  The table travels as the kernel's
// argument, so a small one goes to a kernel with a small table: the launch
// costs less host time.
#include "cuda/sync.h"

#include "cuda/copy_range.cuh"
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
  if (c.size_out && threadIdx.x == 0 && blockIdx.x == 0) *(volatile unsigned long long*)c.size_out = bytes;
  mpn::copy_range(c.src, c.dst, bytes, (size_t)blockIdx.x * kThreads + threadIdx.x, (size_t)gridDim.x * kThreads);
}

template <int F, int C>
struct table_t {
  int device_scope, nfirst, counted;
  int nwait[MPN_SYNC_ROUNDS], ncopy[MPN_SYNC_ROUNDS], nlast[MPN_SYNC_ROUNDS];
  unsigned* counter;          // several blocks: one counter per round with writes
  unsigned long long* done;   // gets epoch once counter is back at 0
  unsigned long long epoch;
  mpn_sync_flag_t flags[F];
  mpn_copy_t copies[C];
};

__device__ inline void fence(int device_scope) {
  if (device_scope)
    __threadfence();
  else
    __threadfence_system();
}

// With several blocks, whether this block is the last of the grid to end
// round number `counted` (from 1) that has writes: each block fences its
// threads' copies and adds one to that round's counter (a block may reach a
// later round before another ends this one); the one that brings it to the
// number of blocks writes the round's flags, after a fence, so that every
// block's copies are ordered before them.  The last of the last such round
// (every block has counted every round by then) puts the counters back at 0
// and then says so (epoch), for the host to give them to another launch.
template <int F, int C>
__device__ bool last_block(const table_t<F, C>& s, int counted) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    fence(s.device_scope);
    last = atomicAdd(&s.counter[counted - 1], 1u) + 1 == gridDim.x;
    if (last) fence(s.device_scope);
    if (last && counted == s.counted) {
      for (int r = 0; r < s.counted; r++) atomicExch(&s.counter[r], 0u);
      __threadfence_system();
      *(volatile unsigned long long*)s.done = s.epoch;
    }
  }
  __syncthreads();
  return last;
}

// Writers fence before they write: through the barrier before them, every
// thread's earlier writes (copies, size words) are ordered before the flag.
// Pollers fence after they see a flag, before the barrier: what the peers
// wrote before it is seen by every thread after.  Every block polls; the
// first block writes the first flags, and a round's writes are the first
// block's (one block) or the last block's to end the round (last_block).
template <int F, int C>
__global__ void sync_kernel(const table_t<F, C> s) {
  const int t = threadIdx.x;
  if (t < s.nfirst && blockIdx.x == 0) {
    fence(s.device_scope);
    flag_write(s.flags[t]);
  }
  int flag = s.nfirst, copy = 0, counted = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    if (s.nwait[r] + s.ncopy[r] + s.nlast[r] == 0) continue;
    if (t < s.nwait[r]) {
      flag_wait(s.flags[flag + t]);
      fence(s.device_scope);
    }
    flag += s.nwait[r];
    __syncthreads();
    for (int i = 0; i < s.ncopy[r]; i++) copy_one(s.copies[copy + i]);
    copy += s.ncopy[r];
    __syncthreads();
    bool writer = blockIdx.x == 0;
    if (gridDim.x > 1 && s.nlast[r] > 0 && s.counter) writer = last_block(s, ++counted);
    if (writer && t < s.nlast[r]) {
      fence(s.device_scope);
      flag_write(s.flags[flag + t]);
    }
    flag += s.nlast[r];
  }
}

template <int F, int C>
cudaError_t launch(const mpn_sync_t* s, int flags, int copies, cudaStream_t stream) {
  table_t<F, C> t;
  t.device_scope = s->device_scope;
  t.nfirst = s->nfirst;
  t.counted = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    t.nwait[r] = s->nwait[r], t.ncopy[r] = s->ncopy[r], t.nlast[r] = s->nlast[r];
    t.counted += s->nlast[r] > 0;
  }
  t.counter = (unsigned*)(uintptr_t)s->grid.counter;
  t.done = (unsigned long long*)(uintptr_t)s->grid.done;
  t.epoch = s->grid.epoch;
  for (int i = 0; i < flags; i++) t.flags[i] = s->flags[i];
  for (int i = 0; i < copies; i++) t.copies[i] = s->copies[i];
  sync_kernel<F, C><<<s->grid.blocks, kThreads, 0, stream>>>(t);
  return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t mpn_sync_launch(const mpn_sync_t* s, cudaStream_t stream) {
  int flags = s->nfirst, copies = 0, bad = s->nfirst < 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    bad |= s->nwait[r] < 0 || s->ncopy[r] < 0 || s->nlast[r] < 0;
    flags += s->nwait[r] + s->nlast[r];
    copies += s->ncopy[r];
  }
  bad |= s->grid.blocks < 1 || s->grid.blocks > MPN_SYNC_BLOCKS;
  for (int r = 0; r < MPN_SYNC_ROUNDS && s->grid.blocks > 1; r++)
    bad |= s->nlast[r] > 0 && !s->grid.counter; /* the blocks could not count */
  if (bad || flags > MPN_SYNC_FLAGS || copies > MPN_SYNC_COPIES) return cudaErrorInvalidValue;
  if (flags <= 16 && copies <= 4) return launch<16, 4>(s, flags, copies, stream);
  return launch<MPN_SYNC_FLAGS, MPN_SYNC_COPIES>(s, flags, copies, stream);
}
