// sync_beside.cu - one process, one thread, two streams: stream A waits (a
// stream memory operation) for a flag that the host writes only after
// cudaStreamSynchronize of stream B, which holds a finished kernel.  Does
// that synchronize wait for B alone (plain CUDA), or for A's wait as well?
// Argument "nokernel": B holds no kernel, only a memset.  Exits 0 when done
// within 10 s, 2 (after saying where it stands) when not.
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__global__ void touch(int* p) { *p += 1; }

static volatile int stage = 0;
static void on_alarm(int sig) {
  (void)sig;
  char msg[96];
  int n = snprintf(msg, sizeof msg, "stuck at stage %d (1: synchronize of B, 2: the flag's write, 3: A)\n", stage);
  if (write(1, msg, (size_t)n) < 0) _exit(3);
  _exit(2);
}

int main(int argc, char** argv) {
  int nokernel = argc > 1 && strcmp(argv[1], "nokernel") == 0;
  signal(SIGALRM, on_alarm);
  alarm(10);
  cudaSetDevice(0);
  cudaFree(0);
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  unsigned* flag;
  int* x;
  cudaMalloc(&flag, sizeof(unsigned));
  cudaMalloc(&x, sizeof(int));
  cudaMemset(flag, 0, sizeof(unsigned));
  cudaMemset(x, 0, sizeof(int));
  touch<<<1, 1>>>(x); /* loaded and patched before the wait */
  cudaDeviceSynchronize();
  CUresult r1 = cuStreamWaitValue32((CUstream)a, (CUdeviceptr)flag, 1, CU_STREAM_WAIT_VALUE_GEQ);
  touch<<<1, 1, 0, a>>>(x);
  if (nokernel) cudaMemsetAsync(x + 0, 0, 0, b);
  else touch<<<1, 1, 0, b>>>(x);
  stage = 1;
  cudaError_t e = cudaStreamSynchronize(b);
  stage = 2;
  CUresult r2 = cuStreamWriteValue32((CUstream)b, (CUdeviceptr)flag, 1, 0);
  stage = 3;
  cudaStreamSynchronize(a);
  int v = 0;
  cudaMemcpy(&v, x, sizeof(v), cudaMemcpyDeviceToHost);
  printf("%s: synchronize of B %s, wait %d, write %d, x = %d\n", nokernel ? "no kernel on B" : "kernel on B",
         cudaGetErrorString(e), (int)r1, (int)r2, v);
  return v == (nokernel ? 2 : 3) ? 0 : 1;
}
