/* Host cost of the calls a finalize mark makes, per call (session 25). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
int main(void) {
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t ev; cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  const int n = 200000; double t0; unsigned long long id; enum cudaStreamCaptureStatus cap; enum cudaStreamCaptureMode m;
  for (int rep = 0; rep < 2; rep++) {
    t0 = now(); for (int i = 0; i < n; i++) cudaEventRecord(ev, s); cudaStreamSynchronize(s); printf("cudaEventRecord %.3f us\n", (now() - t0) / n);
    t0 = now(); for (int i = 0; i < n; i++) cudaStreamGetId(s, &id); printf("cudaStreamGetId %.3f us\n", (now() - t0) / n);
    t0 = now(); for (int i = 0; i < n; i++) { m = cudaStreamCaptureModeRelaxed; cudaThreadExchangeStreamCaptureMode(&m); cudaThreadExchangeStreamCaptureMode(&m); } printf("2x cudaThreadExchangeStreamCaptureMode %.3f us\n", (now() - t0) / n);
    t0 = now(); for (int i = 0; i < n; i++) cudaStreamIsCapturing(s, &cap); printf("cudaStreamIsCapturing %.3f us\n", (now() - t0) / n);
    t0 = now(); for (int i = 0; i < n; i++) cudaEventQuery(ev); printf("cudaEventQuery %.3f us\n", (now() - t0) / n);
  }
  return 0;
}
