// launch_cost.cu - scratch (twenty-eighth session): the host's time per
// kernel launch by the runtime (cudaLaunchKernel, cudaLaunchKernelExC with
// programmatic serialization) and by the driver (cuLaunchKernel on the
// CUfunction the runtime hands out), with a parameter block of 16 or 576
// bytes, launches back to back on one stream.  nvcc -O2 launch_cost.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>

template <int N>
struct blob { unsigned char b[N]; };

template <int N>
__global__ void k(blob<N> p) { if (p.b[0] == 255 && threadIdx.x == 1000) printf("x"); }

static double now() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

template <int N>
void run(cudaStream_t s, int iters) {
  blob<N> p = {};
  void* args[] = {&p};
  CUfunction f;
  cudaGetFuncBySymbol(&f, (const void*)k<N>);
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1); cfg.blockDim = dim3(512); cfg.stream = s; cfg.attrs = &attr; cfg.numAttrs = 1;
  for (int way = 0; way < 3; way++) {
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      cudaStreamSynchronize(s);
      double t0 = now();
      for (int i = 0; i < iters; i++) {
        if (way == 0) cudaLaunchKernel((const void*)k<N>, dim3(1), dim3(512), args, 0, s);
        else if (way == 1) cudaLaunchKernelExC(&cfg, (const void*)k<N>, args);
        else cuLaunchKernel(f, 1, 1, 1, 512, 1, 1, 0, (CUstream)s, args, NULL);
      }
      double t = (now() - t0) / iters * 1e6;
      if (t < best) best = t;
    }
    static const char* names[] = {"cudaLaunchKernel", "cudaLaunchKernelExC early", "cuLaunchKernel"};
    printf("  params %4d B  %-26s %6.2f us per launch\n", N, names[way], best);
  }
}

int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaFree(0);
  run<16>(s, 500);
  run<576>(s, 500);
  run<16>(s, 500);
  run<576>(s, 500);
  cudaStreamSynchronize(s);
  printf("  %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
