/*
 * gpu_probe.c - tells tests/run-test whether GPU tests can run: exit 0 with
 * a usable CUDA device, 77 (skip) without one.
 */
#include <cuda_runtime.h>
#include <stdio.h>

int main(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    printf("gpu_probe: no CUDA device (%s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  printf("gpu_probe: %d CUDA device(s)\n", n);
  return 0;
}
