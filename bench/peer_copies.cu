// peer_copies.cu - copy rates between two GPUs of one host in plain CUDA (no
// mpinccl, no MPI), the floors for exchanges between ranks on different
// GPUs: 1 GiB by the copy engine (cudaMemcpyAsync) or by a copy kernel of
// 32 or 132 blocks of 512 threads, pushed by the source GPU or pulled by
// the destination, one way or both ways at once, and one GPU pushing and
// pulling at once on two streams.  Peer access is turned on both ways; each
// figure is the best of 4, timed with events on GPU 0 around both GPUs'
// streams.  Usage: bench/mpinccl_peer_copies (GPUs 0 and 1).
#include <cuda_runtime.h>

#include <cstdio>

#define CK(x)                                                      \
  do {                                                             \
    cudaError_t e_ = (x);                                          \
    if (e_ != cudaSuccess) {                                       \
      printf("peer_copies: %s: %s\n", #x, cudaGetErrorString(e_)); \
      return 1;                                                    \
    }                                                              \
  } while (0)

namespace {

constexpr size_t kBytes = size_t(1) << 30;

__global__ void kcopy(const int4* __restrict__ s, int4* __restrict__ d, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    d[i] = s[i];
}

struct copy_mode {
  const char* name;
  bool engine;  // cudaMemcpyAsync, else kcopy
  bool pull;    // issued by the destination GPU
  bool both;    // GPU 1 -> 0 at the same time as 0 -> 1
  bool one_gpu; // GPU 0 issues both directions, on two streams
};

const copy_mode kModes[] = {
    {"CE push one way", true, false, false, false},    {"CE pull one way", true, true, false, false},
    {"CE push both ways", true, false, true, false},   {"CE pull both ways", true, true, true, false},
    {"CE one GPU push+pull", true, false, true, true}, {"SM push one way", false, false, false, false},
    {"SM pull one way", false, true, false, false},    {"SM push both ways", false, false, true, false},
    {"SM pull both ways", false, true, true, false},
};

struct gpus_t {
  void *src[2], *dst[2]; // on GPU g
  cudaStream_t stream[2][2];
  cudaEvent_t start, stop;
};

// GPU `from`'s source into GPU `to`'s destination, issued by GPU `by` on its stream `lane`.
int copy(gpus_t& g, const copy_mode& m, int blocks, int from, int to, int by, int lane) {
  CK(cudaSetDevice(by));
  if (m.engine) {
    CK(cudaMemcpyAsync(g.dst[to], g.src[from], kBytes, cudaMemcpyDefault, g.stream[by][lane]));
  } else {
    kcopy<<<blocks, 512, 0, g.stream[by][lane]>>>((const int4*)g.src[from], (int4*)g.dst[to], kBytes / 16);
    CK(cudaGetLastError());
  }
  return 0;
}

// One timed round of mode m: every stream starts after an event on GPU 0's
// first stream, which then waits for all of them.  Milliseconds in *ms.
int round(gpus_t& g, const copy_mode& m, int blocks, float* ms) {
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceSynchronize());
  }
  CK(cudaSetDevice(0));
  CK(cudaEventRecord(g.start, g.stream[0][0]));
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    for (int l = 0; l < 2; l++) CK(cudaStreamWaitEvent(g.stream[d][l], g.start, 0));
  }
  int bad = 0;
  if (m.one_gpu) {
    bad |= copy(g, m, blocks, 0, 1, 0, 0);
    bad |= copy(g, m, blocks, 1, 0, 0, 1);
  } else {
    bad |= copy(g, m, blocks, 0, 1, m.pull ? 1 : 0, 0);
    if (m.both) bad |= copy(g, m, blocks, 1, 0, m.pull ? 0 : 1, 0);
  }
  if (bad) return 1;
  for (int d = 0; d < 2; d++)
    for (int l = 0; l < 2; l++) {
      cudaEvent_t end;
      CK(cudaSetDevice(d));
      CK(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
      CK(cudaEventRecord(end, g.stream[d][l]));
      CK(cudaSetDevice(0));
      CK(cudaStreamWaitEvent(g.stream[0][0], end, 0));
      CK(cudaEventDestroy(end));
    }
  CK(cudaEventRecord(g.stop, g.stream[0][0]));
  CK(cudaEventSynchronize(g.stop));
  CK(cudaEventElapsedTime(ms, g.start, g.stop));
  return 0;
}

} // namespace

int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
    printf("peer_copies: needs two GPUs of one host (found %d)\n", ndev);
    return 2;
  }
  gpus_t g;
  for (int d = 0; d < 2; d++) {
    CK(cudaSetDevice(d));
    CK(cudaDeviceEnablePeerAccess(1 - d, 0));
    CK(cudaMalloc(&g.src[d], kBytes));
    CK(cudaMalloc(&g.dst[d], kBytes));
    CK(cudaMemset(g.src[d], d + 1, kBytes));
    for (int l = 0; l < 2; l++) CK(cudaStreamCreateWithFlags(&g.stream[d][l], cudaStreamNonBlocking));
  }
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&g.start));
  CK(cudaEventCreate(&g.stop));
  for (int blocks : {32, 132})
    for (const copy_mode& m : kModes) {
      if (m.engine && blocks != 32) continue; /* the engine's rows once */
      float best = 1e30f;
      for (int rep = 0; rep < 4; rep++) {
        float ms;
        if (round(g, m, blocks, &ms)) return 1;
        if (ms < best) best = ms;
      }
      printf("%-22s blocks %3d: %8.1f us, %6.1f GB/s per direction\n", m.name, m.engine ? 0 : blocks, best * 1e3,
             kBytes / (best * 1e-3) / 1e9);
    }
  return 0;
}
