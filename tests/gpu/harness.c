/*
 * harness.c - the shared part of the multi-rank GPU tests (harness.h).
 */
#include "harness.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pattern.h"

int rank, nranks, failures;
ncclComm_t comm;
cudaStream_t stream;

static const char* test_name;
static const char *only, *skip;
static int step_barrier;

/* (unsigned arithmetic: k may be a byte count near 2^31, whose product wraps) */
uint32_t seed_of(int src, int dst, int k) {
  return (uint32_t)src * 1000003u + (uint32_t)dst * 7919u + (uint32_t)k * 31u + 1u;
}

static void CUDART_CB sleep_ms(void* ms) { usleep((useconds_t)(uintptr_t)ms * 1000); }

void hold_stream(cudaStream_t s, unsigned ms) {
  EXPECT(cudaLaunchHostFunc(s, sleep_ms, (void*)(uintptr_t)ms) == cudaSuccess);
}

void expect_pattern(const void* buf, size_t bytes, uint32_t seed, const char* what) {
  unsigned long long bad = pattern_check(buf, bytes, seed, stream);
  if (bad) {
    /* What the communicator knows then tells a lost transfer from a released one. */
    ncclResult_t async = ncclSuccess;
    if (comm) ncclCommGetAsyncError(comm, &async);
    fprintf(stderr, "[rank %d] %s: %llu of %zu bytes wrong (async state %s; last error: %s)\n", rank,
            what, bad, bytes, ncclGetErrorString(async), comm ? ncclGetLastError(comm) : "-");
    failures++;
  }
}

int harness_start(int argc, char** argv, const char* name, const char* np_list, const char* env_prefix, int barrier) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts(np_list);
    return 0;
  }
  test_name = name;
  step_barrier = barrier;
  MPI_Init(&argc, &argv);
  int world, ndev = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (world == 0) printf("%s: no GPU: SKIP\n", name);
    MPI_Finalize();
    return 77;
  }
  cudaSetDevice(world % ndev);
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  /* The test's own kernels are loaded now: loaded at a first launch, behind
   * a stream's wait for another thread's flag, they could wait for good
   * (CUDA loads lazily).  Before the communicator, so that nothing of the
   * test loads the library's kernels (src/cuda/kernels.c). */
  void* warm = NULL;
  if (cudaMalloc(&warm, 64) == cudaSuccess) {
    pattern_fill(warm, 64, 0, stream);
    EXPECT(pattern_check(warm, 64, 0, stream) == 0);
    gpu_busy(0, stream);
    cudaStreamSynchronize(stream);
    cudaFree(warm);
  } else {
    cudaGetLastError();
  }
  if (mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess) return 1;
  ncclCommUserRank(comm, &rank);
  ncclCommCount(comm, &nranks);
  setvbuf(stdout, NULL, _IOLBF, 0);
  char env[64];
  snprintf(env, sizeof(env), "%s_ONLY", env_prefix);
  only = getenv(env);
  snprintf(env, sizeof(env), "%s_SKIP", env_prefix);
  skip = getenv(env);
  return -1;
}

int harness_over_ucx(void) {
  const char* t = getenv("MPINCCL_TRANSPORT");
  const char* d = getenv("NCCL_P2P_DISABLE");
  return nranks > 1 && ((t && strcmp(t, "ucx") == 0) || (d && strcmp(d, "1") == 0));
}

int harness_init_all_devices(const char* what, ncclComm_t* comms, int* devs, int max) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2 || rank != 0) {
    if (rank == 0) printf("%s: one GPU, nothing to check\n", what);
    return 0;
  }
  int n = 2 * ndev < max ? 2 * ndev : max;
  for (int i = 0; i < n; i++) devs[i] = i % ndev;
  EXPECT_OK(ncclCommInitAll(comms, n, devs));
  return n;
}

void harness_init_all_here(ncclComm_t* comms, int n) {
  int dev = 0, devs[8];
  cudaGetDevice(&dev);
  for (int i = 0; i < n && i < 8; i++) devs[i] = dev;
  EXPECT_OK(ncclCommInitAll(comms, n, devs));
}

void harness_hold_devices(int first, int others, cudaStream_t h) {
  int ndev = 0;
  cudaGetDeviceCount(&ndev);
  for (int d = 0; d < ndev; d++)
    if ((d != first) == others) {
      cudaSetDevice(d);
      gpu_busy(50000, h);
    }
}

int harness_device_order(const int* devs, int n, int k, int first_first) {
  int seen = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++)
      if (((pass == 0) != (devs[i] == devs[0])) != first_first && seen++ == k) return i;
  return k;
}

void harness_same_capture_refused(ncclComm_t c, ncclResult_t res) {
  EXPECT(res == ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(c), "same CUDA graph capture") != NULL);
  cudaGraph_t g = NULL;
  EXPECT(cudaStreamEndCapture(stream, &g) == cudaSuccess);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  ncclResult_t async = ncclSuccess;
  EXPECT(ncclCommGetAsyncError(c, &async) == ncclSuccess);
  EXPECT(async == ncclInvalidUsage); /* its numbering with the peers is out of step */
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Whether text holds one of the comma-separated words of list. */
static int names_any(const char* list, const char* text) {
  for (const char* w = list; *w;) {
    size_t n = strcspn(w, ",");
    char word[128];
    if (n > 0 && n < sizeof(word)) {
      memcpy(word, w, n);
      word[n] = '\0';
      if (strstr(text, word) != NULL) return 1;
    }
    w += n + (w[n] == ',');
  }
  return 0;
}

int harness_selected(const char* text) {
  return (only == NULL || strstr(text, only) != NULL) && (skip == NULL || !names_any(skip, text));
}

void harness_step_done(const char* text) {
  if (step_barrier) MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("%s: %s done (%d failures so far)\n", test_name, text, failures);
}

int harness_finish(void) {
  EXPECT_OK(ncclCommDestroy(comm));
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("%s: %d ranks, %d failures\n", test_name, nranks, total);
  cudaStreamDestroy(stream);
  MPI_Finalize();
  return total ? 1 : 0;
}
