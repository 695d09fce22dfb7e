// peer_copies.cu - copy rates between two GPUs of one host in plain CUDA (no
// mpinccl, no MPI), the floors for exchanges between ranks on different
// GPUs: 1 GiB by the copy engine (cudaMemcpyAsync) or by a copy kernel of
// 32 or 132 blocks of 512 threads, pushed by the source GPU or pulled by
// the destination, one way or both ways at once, and one GPU pushing and
// pulling at once on two streams.  Peer access is turned on both ways;
// each figure is the best of 4, timed with events on GPU 0 around both
// GPUs' streams.  Usage: bench/mpinccl_peer_copies (GPUs 0 and 1).
#include <cstdio>
#include <cuda_runtime.h>
#define CK(x)                                        \
  do {                                               \
    cudaError_t e = (x);                             \
    if (e) {                                         \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                      \
    }                                                \
  } while (0)
__global__ void kcopy(const int4* __restrict__ s, int4* __restrict__ d, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    d[i] = s[i];
}
int main() {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
    printf("peer_copies: needs two GPUs of one host (found %d)\n", ndev);
    return 2;
  }
  const size_t B = 1ull << 30;
  void *a[2], *b[2]; // a[g], b[g] on GPU g
  cudaStream_t st[2][2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaMalloc(&a[g], B));
    CK(cudaMalloc(&b[g], B));
    CK(cudaMemset(a[g], g + 1, B));
    CK(cudaStreamCreateWithFlags(&st[g][0], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&st[g][1], cudaStreamNonBlocking));
  }
  cudaEvent_t e0, e1;
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // mode: who issues the copy g->h. push: on GPU g's stream, src a[g] dst b[h]; pull: on GPU h's stream.
  const char* names[] = {"CE push one way",   "CE pull one way",      "CE push both ways",
                         "CE pull both ways", "CE one GPU push+pull", "SM push one way",
                         "SM pull one way",   "SM push both ways",    "SM pull both ways"};
  for (int blocks : {32, 132})
    for (int m = 0; m < 9; m++) {
      if (m < 5 && blocks != 32) continue;
      double best = 1e30;
      for (int rep = 0; rep < 4; rep++) {
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaDeviceSynchronize());
        }
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(e0, st[0][0]));
        for (int g = 0; g < 2; g++) {
          CK(cudaSetDevice(g));
          CK(cudaStreamWaitEvent(st[g][0], e0));
          CK(cudaStreamWaitEvent(st[g][1], e0));
        }
        auto copy = [&](int from, int to, int by, int lane) -> int {
          CK(cudaSetDevice(by));
          if (m < 5)
            CK(cudaMemcpyAsync(b[to], a[from], B, cudaMemcpyDefault, st[by][lane]));
          else
            kcopy<<<blocks, 512, 0, st[by][lane]>>>((const int4*)a[from], (int4*)b[to], B / 16);
          return 0;
        };
        int both = (m == 2 || m == 3 || m == 7 || m == 8);
        int pull = (m == 1 || m == 3 || m == 6 || m == 8);
        if (m == 4) {
          copy(0, 1, 0, 0);
          copy(1, 0, 0, 1);
        } else {
          copy(0, 1, pull ? 1 : 0, 0);
          if (both) copy(1, 0, pull ? 0 : 1, 0);
        }
        for (int g = 0; g < 2; g++)
          for (int l = 0; l < 2; l++) {
            CK(cudaSetDevice(g));
            cudaEvent_t x;
            CK(cudaEventCreateWithFlags(&x, cudaEventDisableTiming));
            CK(cudaEventRecord(x, st[g][l]));
            CK(cudaSetDevice(0));
            CK(cudaStreamWaitEvent(st[0][0], x));
          }
        CK(cudaSetDevice(0));
        CK(cudaEventRecord(e1, st[0][0]));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
      }
      printf("%-22s blocks %3d: %8.1f us, %6.1f GB/s per direction\n", names[m], m < 5 ? 0 : blocks, best * 1e3,
             B / (best * 1e-3) / 1e9);
    }
  return 0;
}
