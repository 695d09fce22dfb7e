// ipc_twice.cu - does compute-sanitizer follow the driver's count of CUDA IPC
// opens?  A parent process exports a 4 KiB buffer; its child opens the
// handle twice, closes it once, then reads the buffer in a kernel and checks
// it, and closes it a second time.
#include <cuda_runtime.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

__global__ void sum_kernel(const unsigned* p, int n, unsigned* out) {
  unsigned s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += p[i];
  atomicAdd(out, s);
}

int main() {
  int to_child[2], to_parent[2];
  if (pipe(to_child) || pipe(to_parent)) return 2;
  const int n = 1024;
  pid_t pid = fork();
  if (pid == 0) {
    cudaIpcMemHandle_t h;
    if (read(to_child[0], &h, sizeof(h)) != sizeof(h)) return 3;
    void *a = NULL, *b = NULL;
    cudaError_t e1 = cudaIpcOpenMemHandle(&a, h, cudaIpcMemLazyEnablePeerAccess);
    cudaError_t e2 = cudaIpcOpenMemHandle(&b, h, cudaIpcMemLazyEnablePeerAccess);
    printf("child: open 1 %s at %p, open 2 %s at %p\n", cudaGetErrorString(e1), a, cudaGetErrorString(e2), b);
    cudaError_t c1 = cudaIpcCloseMemHandle(a);
    printf("child: close 1 %s\n", cudaGetErrorString(c1));
    unsigned* out;
    cudaMalloc(&out, sizeof(unsigned));
    cudaMemset(out, 0, sizeof(unsigned));
    sum_kernel<<<1, 256>>>((const unsigned*)a, n, out);
    cudaError_t k = cudaDeviceSynchronize();
    unsigned got = 0;
    cudaMemcpy(&got, out, sizeof(got), cudaMemcpyDeviceToHost);
    printf("child: read after one close: %s, sum %u (expected %u)\n", cudaGetErrorString(k), got,
           (unsigned)(n * (n - 1) / 2));
    cudaError_t c2 = cudaIpcCloseMemHandle(a);
    printf("child: close 2 %s\n", cudaGetErrorString(c2));
    char done = 1;
    if (write(to_parent[1], &done, 1) != 1) return 4;
    return (k == cudaSuccess && got == (unsigned)(n * (n - 1) / 2)) ? 0 : 1;
  }
  unsigned host[n];
  for (int i = 0; i < n; i++) host[i] = i;
  unsigned* buf;
  cudaMalloc(&buf, n * sizeof(unsigned));
  cudaMemcpy(buf, host, sizeof(host), cudaMemcpyHostToDevice);
  cudaIpcMemHandle_t h;
  cudaIpcGetMemHandle(&h, buf);
  if (write(to_child[1], &h, sizeof(h)) != sizeof(h)) return 5;
  char done;
  if (read(to_parent[0], &done, 1) != 1) return 6;
  int status = 0;
  waitpid(pid, &status, 0);
  printf("parent: child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 7;
}
