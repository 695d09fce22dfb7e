// first_launch.cu - one process, two streams: stream A waits (a stream memory
// operation) for a flag that stream B writes after a kernel k2.  Is the
// first launch of k2 held behind A's pending wait (a load or a tool's
// patching that waits for the context), with and without compute-sanitizer?
// Argument "warm": k2 is launched once before the wait; "loaded": k2 is
// loaded (cuFuncLoad), not launched, before it.  Exits 0 when both
// streams finish within 10 s, 2 (after printing where it stands) when not.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>

__global__ void k1(int* p) { *p += 1; }
__global__ void k2(int* p) { *p += 10; }

static volatile int stage = 0;
static void on_alarm(int sig) {
  (void)sig;
  char msg[96];
  int n = snprintf(msg, sizeof msg, "stuck at stage %d (1: k2 launch, 2: write, 3: waiting for the streams)\n", stage);
  if (write(1, msg, (size_t)n) < 0) _exit(3);
  _exit(2);
}

int main(int argc, char** argv) {
  int warm = argc > 1 && strcmp(argv[1], "warm") == 0;
  int loaded = argc > 1 && strcmp(argv[1], "loaded") == 0;
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
  k1<<<1, 1>>>(x);
  if (warm) k2<<<1, 1>>>(x);
  if (loaded) {
    cudaFunction_t f = NULL;
    cudaError_t e = cudaGetFuncBySymbol(&f, (const void*)k2);
    CUresult r = cuFuncLoad((CUfunction)f);
    printf("k2 loaded: %s, %d\n", cudaGetErrorString(e), (int)r);
  }
  cudaMemset(x, 0, sizeof(int));
  cudaDeviceSynchronize();
  CUresult r1 = cuStreamWaitValue32((CUstream)a, (CUdeviceptr)flag, 1, CU_STREAM_WAIT_VALUE_GEQ);
  k1<<<1, 1, 0, a>>>(x);
  stage = 1;
  k2<<<1, 1, 0, b>>>(x);
  stage = 2;
  CUresult r2 = cuStreamWriteValue32((CUstream)b, (CUdeviceptr)flag, 1, 0);
  stage = 3;
  printf("enqueued (%s): wait %d, write %d\n", warm ? "k2 launched before" : loaded ? "k2 loaded before" : "k2's first launch", (int)r1, (int)r2);
  fflush(stdout);
  cudaStreamSynchronize(b);
  cudaStreamSynchronize(a);
  int v = 0;
  cudaMemcpy(&v, x, sizeof(v), cudaMemcpyDeviceToHost);
  printf("both streams done, x = %d\n", v);
  return v == 11 ? 0 : 1;
}
