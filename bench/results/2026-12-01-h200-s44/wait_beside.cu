// wait_beside.cu - one process, two streams: stream A waits (a stream memory
// operation) for a flag that stream B writes after a kernel.  Does a kernel
// of B still run while A's wait is pending, under compute-sanitizer as
// without it?  Exits 0 when both streams finish within 10 s.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <unistd.h>

__global__ void touch(int* p) { *p += 1; }

int main() {
  cudaSetDevice(0);
  cudaFree(0);
  cudaStream_t a, b;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  unsigned* flag;
  cudaMalloc(&flag, sizeof(unsigned));
  cudaMemset(flag, 0, sizeof(unsigned));
  int* x;
  cudaMalloc(&x, sizeof(int));
  cudaMemset(x, 0, sizeof(int));
  touch<<<1, 1>>>(x); /* loaded now: a lazy load behind the wait would wait for it */
  cudaMemset(x, 0, sizeof(int));
  cudaDeviceSynchronize();
  CUresult r1 = cuStreamWaitValue32((CUstream)a, (CUdeviceptr)flag, 1, CU_STREAM_WAIT_VALUE_GEQ);
  touch<<<1, 1, 0, a>>>(x); /* after the wait */
  touch<<<1, 1, 0, b>>>(x);
  CUresult r2 = cuStreamWriteValue32((CUstream)b, (CUdeviceptr)flag, 1, 0);
  printf("enqueued: wait %d, write %d\n", (int)r1, (int)r2);
  fflush(stdout);
  for (int i = 0; i < 1000; i++) {
    if (cudaStreamQuery(a) == cudaSuccess && cudaStreamQuery(b) == cudaSuccess) {
      int v = 0;
      cudaMemcpy(&v, x, sizeof(v), cudaMemcpyDeviceToHost);
      printf("both streams done after %d ms, x = %d\n", i * 10, v);
      return v == 2 ? 0 : 1;
    }
    usleep(10000);
  }
  printf("not done after 10 s: stream a %s, stream b %s\n", cudaGetErrorString(cudaStreamQuery(a)),
         cudaGetErrorString(cudaStreamQuery(b)));
  return 2;
}
