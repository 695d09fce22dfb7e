// sync.cu - the flag-and-copy kernel (sync.h).  One block, or more where
// the copies are large.  Blocks share the work through lists that they take
// items from (sync.h's counters), never waiting for one another: whichever
// blocks are resident do all of it, one alone if need be, so a grid that is
// only partly resident on a busy GPU cannot hang.  Flags are read and
// written volatile; fences are at system scope unless the table says that
// everything is in this GPU's memory.  The table travels as the kernel's
// argument, so a small one goes to a kernel with a small table: the launch
// costs less host time.
//
// A kernel of one block may be launched early (programmatic dependent
// launch): every kernel lets the next such launch proceed as soon as all its
// blocks run (griddepcontrol.launch_dependents), and waits, first thing, for
// the grids before it to finish and their writes to be visible
// (griddepcontrol.wait; a no-op for an ordinary launch).  So a flag kernel
// that follows one of ours on a stream is resident before that one ends and
// starts at once: one kernel launch's latency less per group where groups
// follow each other.  Only a kernel after one of ours starts early (any
// other kernel lets it run only when it ends), and only grids of one block
// take part: an early grid holds its multiprocessors while it waits, and
// one block per rank cannot keep out a peer's kernel.
#include "cuda/sync.h"

#include "cuda/copy_range.cuh"
#include "cuda/flagop.h"

namespace {

constexpr int kThreads = 512;
// A chunk: what one block moves in one step of the copy loop.
constexpr size_t kChunk = (size_t)kThreads * 16 * mpn::kUnroll;
static_assert(kChunk == MPN_SYNC_BLOCK_BYTES, "a block's share (sync.h) is one step of its copy loop");
static_assert(MPN_SYNC_FLAGS <= kThreads, "one thread per flag of a part");

__device__ void flag_write(const mpn_sync_flag_t& f) {
  *(volatile unsigned long long*)f.addr = f.value;
}

__device__ inline bool flag_ready(const mpn_sync_flag_t& f, unsigned long long v) {
  if (f.kind == MPN_MEMOP_WAIT_GEQ || f.kind == MPN_MEMOP_WAIT_GEQ_CLEAR) return v >= f.value;
  if (f.kind == MPN_MEMOP_WAIT_NOR) return ~(v | f.value) != 0;
  return v == f.value;
}

// A wait that clears its flag (a captured message's) leaves the clearing to
// the block that completes the round (round_done): several blocks poll it.
// Its escape word (host memory: a slow read) is looked at once in 256 polls.
__device__ void flag_wait(const mpn_sync_flag_t& f, const unsigned long long* escape) {
  volatile unsigned long long* p = (volatile unsigned long long*)f.addr;
  const volatile unsigned* e = f.escape ? (const volatile unsigned*)escape[f.escape - 1] : nullptr;
  for (unsigned n = 1; !flag_ready(f, *p); n++) {
    if (e && (n & 255) == 0 && *e) return;
    __nanosleep(100);
  }
}

__host__ __device__ inline size_t chunks_of(const mpn_copy_t& c) {
  return c.bytes <= kChunk ? 1 : (c.bytes + kChunk - 1) / kChunk;
}

// Chunk k of copy c (bytes [k * kChunk, (k + 1) * kChunk) of what it moves:
// no more than its limit word says), by this block's threads; the first
// chunk's block also writes the size word.
__device__ void copy_chunk(const mpn_copy_t& c, size_t k) {
  const size_t bytes = mpn_copy_bytes(c);
  if (k == 0 && c.size_out && threadIdx.x == 0) *(volatile unsigned long long*)c.size_out = bytes;
  size_t from = k * kChunk;
  if (from >= bytes) return;
  size_t n = bytes - from < kChunk ? bytes - from : kChunk;
  mpn::copy_range((const char*)c.src + from, (char*)c.dst + from, n, threadIdx.x, kThreads);
}

template <int F, int C>
struct table_t {
  int device_scope, nfirst;
  int clears; /* some wait clears its flag (a captured launch's) */
  int nwait[MPN_SYNC_ROUNDS], ncopy[MPN_SYNC_ROUNDS], nlast[MPN_SYNC_ROUNDS];
  unsigned* counter;          // several blocks: MPN_SYNC_COUNTERS, at 0 (sync.h)
  unsigned long long* done;   // gets epoch once they are back at 0
  unsigned long long epoch;
  unsigned long long* mark; // set to mark_value last, if not NULL
  unsigned long long mark_value;
  unsigned long long escape[MPN_SYNC_ESCAPES]; // 32-bit host words (mapped) that let waits go (sync.h)
  mpn_sync_flag_t flags[F];
  mpn_copy_t copies[C];
};

__device__ inline void fence(int device_scope) {
  if (device_scope)
    __threadfence();
  else
    __threadfence_system();
}

// Adds one to counter i and returns what it was, for every thread of the
// block: the grid's counter with several blocks (after a barrier: the
// block's threads are done with what came before), else the thread's own
// count, the same in every thread of the one block (the caller places the
// barriers it needs).
__device__ unsigned count(unsigned* counter, unsigned* own, int i, int fence_scope = -1) {
  if (!counter) return own[i]++;
  __shared__ unsigned got;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (fence_scope >= 0) fence(fence_scope); /* fences are cumulative: the block's writes too */
    got = atomicAdd(&counter[i], 1u);
  }
  __syncthreads();
  return got;
}

// Each list below is taken item by item: the first writes (one item), then
// each round's chunks (at least one, so that some block polls its waits
// even without copies).  A block polls a round's waits before its first
// chunk of the round.  Before a chunk is counted done, thread 0 fences
// after the block's barrier (fences are cumulative: they order the block's
// copies too); the block that counts the round's last chunk done writes
// the round's flags, after a fence, so every block's copies are ordered
// before them.  Writers fence before they write; pollers fence after they
// see a flag, before the barrier.  The last block to leave puts the
// counters back at 0 and says so (epoch), for the host to give them to
// another launch (or, captured, to the next replay).
//
// A captured message's flag goes 0 -> 1 -> 0 on every replay: its waiter
// puts it back.  Every block that polls a round's waits does so before it
// takes a chunk of the round, so once all its chunks are done no block
// polls them any more; the block that completes the round clears them
// then, before the round's writes, which the peer must see before it can
// set one of them again.
// Chunk k of the copies [first, end), by this block.
template <int F, int C>
__device__ __forceinline__ void round_chunk(const table_t<F, C>& s, int first, int end, size_t k) {
  for (int i = first; i < end; i++) {
    size_t n = chunks_of(s.copies[i]);
    if (k < n) {
      copy_chunk(s.copies[i], k);
      return;
    }
    k -= n;
  }
}

// By the whole block that counted round r's last chunk done: the clears of
// the round's waits (flags from first_flag on), then its writes.
template <int F, int C>
__device__ __forceinline__ void round_done(const table_t<F, C>& s, int r, int first_flag) {
  const int t = threadIdx.x;
  if (s.clears) {
    if (t < s.nwait[r] && s.flags[first_flag + t].kind == MPN_MEMOP_WAIT_GEQ_CLEAR)
      *(volatile unsigned long long*)s.flags[first_flag + t].addr = 0;
    __syncthreads();
  }
  if (t < s.nlast[r]) {
    fence(s.device_scope); /* cumulative: the clears above too */
    flag_write(s.flags[first_flag + s.nwait[r] + t]);
  }
}

// Round r, whose copies are [first_copy, end_copy) and whose flags start
// at first_flag: this block takes its chunks until none is left, polling
// the round's waits before its first.
template <int F, int C>
__device__ __forceinline__ void run_round(const table_t<F, C>& s, unsigned* own, int r, int first_copy, int end_copy,
                                          int first_flag) {
  const int t = threadIdx.x;
  size_t total = 0;
  for (int i = first_copy; i < end_copy; i++) total += chunks_of(s.copies[i]);
  if (total == 0) total = 1;
  bool polled = false;
  for (size_t k; (k = count(s.counter, own, 1 + r)) < total;) {
    if (!polled) {
      if (t < s.nwait[r]) {
        flag_wait(s.flags[first_flag + t], s.escape);
        fence(s.device_scope);
      }
      __syncthreads();
      polled = true;
    }
    round_chunk(s, first_copy, end_copy, k);
    if (!s.counter) __syncthreads(); /* (count's own barrier otherwise) */
    if (count(s.counter, own, 1 + MPN_SYNC_ROUNDS + r, s.device_scope) + 1 == total) round_done(s, r, first_flag);
  }
}

// The block's leaving: one block sets the mark after its copies and
// writes; of several, the last to leave puts the counters back at 0, then
// says so (epoch) and sets the mark.
template <int F, int C>
__device__ __forceinline__ void leave(const table_t<F, C>& s) {
  const int t = threadIdx.x;
  if (!s.counter) {
    if (s.mark) {
      __syncthreads(); /* the block's copies and writes before the mark */
      if (t == 0) {
        fence(s.device_scope); /* as for a flag: the host reads the mark after the kernel's other writes */
        *(volatile unsigned long long*)s.mark = s.mark_value;
      }
    }
    return;
  }
  __shared__ int last;
  __syncthreads();
  if (t == 0) {
    __threadfence(); /* this block's counts before its leaving */
    last = atomicAdd(&s.counter[MPN_SYNC_COUNTERS - 1], 1u) + 1 == gridDim.x;
    if (last) __threadfence(); /* every block's counts before the reset */
  }
  __syncthreads();
  if (last && t == 0) {
    for (int i = 0; i < MPN_SYNC_COUNTERS; i++) atomicExch(&s.counter[i], 0u);
    __threadfence_system();
    *(volatile unsigned long long*)s.done = s.epoch;
    if (s.mark) *(volatile unsigned long long*)s.mark = s.mark_value;
  }
}

template <int F, int C>
__global__ void __launch_bounds__(kThreads, 1) sync_kernel(const table_t<F, C> s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  unsigned own[MPN_SYNC_COUNTERS] = {0};
  const int t = threadIdx.x;
  if (count(s.counter, own, 0) == 0 && t < s.nfirst) {
    fence(s.device_scope);
    flag_write(s.flags[t]);
  }
  int flag = s.nfirst, copy = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    const int first_copy = copy, first_flag = flag;
    copy += s.ncopy[r];
    flag += s.nwait[r] + s.nlast[r];
    if (s.nwait[r] + s.ncopy[r] + s.nlast[r] == 0) continue;
    run_round(s, own, r, first_copy, copy, first_flag);
  }
  leave(s);
}

// Cleared for the process once an early launch is refused, or when the
// kernels lack griddepcontrol.wait (mpn_sync_early_check).
int early_ok = 1;

// One block as a programmatic dependent launch.
template <int F, int C>
cudaError_t launch_early(void** args, cudaStream_t stream) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = stream;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelExC(&cfg, (const void*)sync_kernel<F, C>, args);
}

template <int F, int C>
cudaError_t launch(const mpn_sync_t* s, int flags, int copies, int early, cudaStream_t stream) {
  table_t<F, C> t;
  t.device_scope = s->device_scope;
  t.nfirst = s->nfirst;
  t.clears = 0;
  for (int i = 0; i < flags; i++) t.clears |= s->flags[i].kind == MPN_MEMOP_WAIT_GEQ_CLEAR;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) t.nwait[r] = s->nwait[r], t.ncopy[r] = s->ncopy[r], t.nlast[r] = s->nlast[r];
  t.counter = (unsigned*)(uintptr_t)s->grid.counter;
  t.done = (unsigned long long*)(uintptr_t)s->grid.done;
  t.epoch = s->grid.epoch;
  t.mark = (unsigned long long*)(uintptr_t)s->mark;
  t.mark_value = s->mark_value;
  for (int i = 0; i < MPN_SYNC_ESCAPES; i++) t.escape[i] = i < s->nescape ? s->escape[i] : 0;
  for (int i = 0; i < flags; i++) t.flags[i] = s->flags[i];
  for (int i = 0; i < copies; i++) t.copies[i] = s->copies[i];
  void* args[] = {&t}; /* the launch's own result, not an older error of the thread */
  if (early && s->grid.blocks == 1 && __atomic_load_n(&early_ok, __ATOMIC_RELAXED)) {
    if (launch_early<F, C>(args, stream) == cudaSuccess) return cudaSuccess;
    cudaGetLastError(); /* refused (an older device or driver): ordinary launches from now on */
    __atomic_store_n(&early_ok, 0, __ATOMIC_RELAXED);
  }
  cudaError_t err =
      cudaLaunchKernel((const void*)sync_kernel<F, C>, dim3(s->grid.blocks), dim3(kThreads), args, 0, stream);
  if (err != cudaSuccess) cudaGetLastError(); /* a refused launch, which CUDA recorded (sync.h) */
  return err;
}

}  // namespace

extern "C" int mpn_sync_kernels(const void** out) {
  out[0] = (const void*)sync_kernel<16, 4>;
  out[1] = (const void*)sync_kernel<MPN_SYNC_FLAGS, MPN_SYNC_COPIES>;
  return 2;
}

extern "C" void mpn_sync_early_check(void) {
  const void* kernels[2];
  int n = mpn_sync_kernels(kernels);
  for (int i = 0; i < n; i++) {
    cudaFuncAttributes a;
    cudaError_t err = cudaFuncGetAttributes(&a, kernels[i]);
    if (err == cudaSuccess && a.ptxVersion >= 90) continue;
    if (err != cudaSuccess) cudaGetLastError(); /* (an old PTX version is no error to clear) */
    __atomic_store_n(&early_ok, 0, __ATOMIC_RELAXED);
  }
}

extern "C" cudaError_t mpn_sync_launch(const mpn_sync_t* s, int early, cudaStream_t stream) {
  int flags = s->nfirst, copies = 0, bad = s->nfirst < 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) {
    bad |= s->nwait[r] < 0 || s->ncopy[r] < 0 || s->nlast[r] < 0;
    flags += s->nwait[r] + s->nlast[r];
    copies += s->ncopy[r];
  }
  bad |= s->grid.blocks < 1 || s->grid.blocks > MPN_SYNC_BLOCKS ||
         (s->grid.blocks > 1 && (!s->grid.counter || !s->grid.done || !s->grid.epoch));
  if (bad || flags > MPN_SYNC_FLAGS || copies > MPN_SYNC_COPIES) return cudaErrorInvalidValue;
  if (flags <= 16 && copies <= 4) return launch<16, 4>(s, flags, copies, early, stream);
  return launch<MPN_SYNC_FLAGS, MPN_SYNC_COPIES>(s, flags, copies, early, stream);
}
