/*
 * ring.c - the NCCL-style ring: one process, one thread, every rank of
 * ncclCommInitAll driven inside one group.  Each step, rank i sends the
 * block it holds to rank i + 1 and receives rank i - 1's, so after k steps
 * rank i holds the block rank i - k started with; the program checks every
 * element of that at the end.  Ranks go round robin over the visible GPUs
 * (-d names them); with one GPU they share it, which mpinccl allows.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "nccl.h"

#define MAX_RANKS 64

#define CUDA_CHECK(call)                                                         \
  do {                                                                           \
    cudaError_t err_ = (call);                                                   \
    if (err_ != cudaSuccess) {                                                   \
      fprintf(stderr, "ring: %s failed: %s\n", #call, cudaGetErrorString(err_)); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

#define NCCL_CHECK(comm, call)                                                                  \
  do {                                                                                          \
    ncclResult_t res_ = (call);                                                                 \
    if (res_ != ncclSuccess) {                                                                  \
      fprintf(stderr, "ring: %s failed: %s; last error: %s\n", #call, ncclGetErrorString(res_), \
              ncclGetLastError(comm));                                                          \
      exit(1);                                                                                  \
    }                                                                                           \
  } while (0)

typedef struct {
  int nranks;          /* 0: as many as devices, at least 2 */
  int devs[MAX_RANKS]; /* -d: device of each rank, ndevs of them given */
  int ndevs;
  size_t count; /* 32-bit elements per block */
  int iters, warmup;
} options_t;

typedef struct {
  int dev;
  cudaStream_t stream;
  uint32_t* buf[2]; /* the block held and the one arriving, swapped each step */
} rank_t;

/* Element j of the block rank `origin` starts with. */
static uint32_t pattern(int origin, size_t j) { return (uint32_t)j * 2654435761u + (uint32_t)origin * 40503u + 1u; }

static double now_us(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return tv.tv_sec * 1e6 + tv.tv_usec;
}

static void usage(FILE* to) {
  fprintf(to,
          "usage: ring [-r RANKS] [-d DEV,DEV,...] [-c COUNT] [-i ITERS] [-w WARMUP]\n"
          "  -r RANKS  ranks of the ring (default: one per visible GPU, at least 2)\n"
          "  -d LIST   device of each rank, comma separated (repeat a device to share it);\n"
          "            default: rank i on device i %% (number of GPUs)\n"
          "  -c COUNT  32-bit elements per block (default 1048576; 0 is allowed)\n"
          "  -i ITERS  timed steps (default 20)\n"
          "  -w WARMUP untimed steps before them (default 5)\n");
}

static int parse_devs(const char* s, options_t* o) {
  o->ndevs = 0;
  while (*s) {
    char* end;
    long d = strtol(s, &end, 10);
    if (end == s || d < 0 || o->ndevs == MAX_RANKS) return -1;
    o->devs[o->ndevs++] = (int)d;
    s = *end == ',' ? end + 1 : end;
    if (*end && *end != ',') return -1;
  }
  return o->ndevs > 0 ? 0 : -1;
}

static int parse(int argc, char** argv, options_t* o) {
  *o = (options_t){.nranks = 0, .ndevs = 0, .count = 1u << 20, .iters = 20, .warmup = 5};
  int c;
  while ((c = getopt(argc, argv, "r:d:c:i:w:h")) != -1) {
    char* end = NULL;
    errno = 0;
    long v = optarg ? strtol(optarg, &end, 10) : 0;
    int bad = optarg && c != 'd' && (end == optarg || *end || v < 0 || errno == ERANGE);
    switch (c) {
      case 'r':
        o->nranks = (int)v;
        bad |= v < 1 || v > MAX_RANKS;
        break;
      case 'd': bad = parse_devs(optarg, o) != 0; break;
      case 'c': /* (the block's bytes, and the one more cudaMalloc'ed, must not wrap) */
        o->count = (size_t)v;
        bad |= (unsigned long)v > (SIZE_MAX - 1) / sizeof(uint32_t);
        break;
      case 'i':
        o->iters = (int)v;
        bad |= v < 1 || v > INT_MAX;
        break;
      case 'w':
        o->warmup = (int)v;
        bad |= v > INT_MAX;
        break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
    if (bad) {
      fprintf(stderr, "ring: bad value '%s' for -%c\n", optarg, c);
      usage(stderr);
      return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "ring: unexpected argument '%s'\n", argv[optind]);
    return -1;
  }
  return 0;
}

/* One step: every rank sends what it holds and receives its left
 * neighbour's, all ranks in one group (they are driven by one thread). */
static void step(ncclComm_t* comms, rank_t* r, int n, size_t count, int k) {
  NCCL_CHECK(NULL, ncclGroupStart());
  for (int i = 0; i < n; i++) {
    NCCL_CHECK(comms[i], ncclSend(r[i].buf[k & 1], count, ncclUint32, (i + 1) % n, comms[i], r[i].stream));
    NCCL_CHECK(comms[i], ncclRecv(r[i].buf[(k + 1) & 1], count, ncclUint32, (i + n - 1) % n, comms[i], r[i].stream));
  }
  NCCL_CHECK(NULL, ncclGroupEnd());
}

static void sync_all(rank_t* r, int n) {
  for (int i = 0; i < n; i++) {
    CUDA_CHECK(cudaSetDevice(r[i].dev));
    CUDA_CHECK(cudaStreamSynchronize(r[i].stream));
  }
}

/* Rank i holds, after `steps` steps, the block of rank i - steps. */
static int check(rank_t* r, int n, size_t count, int steps) {
  uint32_t* host = malloc(count ? count * sizeof(uint32_t) : 1);
  if (host == NULL) return 0;
  size_t wrong = 0;
  for (int i = 0; i < n; i++) {
    int origin = (int)(((long)i - steps % n + n) % n);
    CUDA_CHECK(cudaSetDevice(r[i].dev));
    CUDA_CHECK(cudaMemcpy(host, r[i].buf[steps & 1], count * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < count; j++)
      if (host[j] != pattern(origin, j)) {
        if (wrong++ == 0)
          fprintf(stderr, "ring: rank %d element %zu is %u, expected %u (block of rank %d)\n", i, j, host[j],
                  pattern(origin, j), origin);
      }
  }
  free(host);
  if (wrong)
    printf("check: %zu elements wrong (FAIL)\n", wrong);
  else
    printf("check: every rank holds the block of rank (i - %d) mod %d (PASS)\n", steps, n);
  return wrong == 0;
}

int main(int argc, char** argv) {
  options_t o;
  if (parse(argc, argv, &o) != 0) return 2;
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
    fprintf(stderr, "ring: no CUDA GPU found on this machine; this example needs one\n");
    return 1;
  }
  int n = o.nranks ? o.nranks : o.ndevs ? o.ndevs : ngpu < 2 ? 2 : ngpu;
  if (n > MAX_RANKS) n = MAX_RANKS;
  if (o.ndevs && o.ndevs != n) {
    fprintf(stderr, "ring: -d lists %d devices for %d ranks\n", o.ndevs, n);
    return 2;
  }
  int devs[MAX_RANKS];
  for (int i = 0; i < n; i++) devs[i] = o.ndevs ? o.devs[i] : i % ngpu;

  ncclComm_t comms[MAX_RANKS];
  NCCL_CHECK(NULL, ncclCommInitAll(comms, n, devs));
  rank_t r[MAX_RANKS];
  uint32_t* host = malloc(o.count ? o.count * sizeof(uint32_t) : 1);
  if (host == NULL) return 1;
  for (int i = 0; i < n; i++) {
    r[i].dev = devs[i];
    CUDA_CHECK(cudaSetDevice(devs[i]));
    CUDA_CHECK(cudaStreamCreateWithFlags(&r[i].stream, cudaStreamNonBlocking));
    for (int b = 0; b < 2; b++) CUDA_CHECK(cudaMalloc((void**)&r[i].buf[b], o.count * sizeof(uint32_t) + 1));
    for (size_t j = 0; j < o.count; j++) host[j] = pattern(i, j);
    CUDA_CHECK(cudaMemcpy(r[i].buf[0], host, o.count * sizeof(uint32_t), cudaMemcpyHostToDevice));
  }
  free(host);

  printf("ring: %d ranks in one process on devices", n);
  for (int i = 0; i < n; i++) printf("%s%d", i ? "," : " ", devs[i]);
  printf("; blocks of %zu x uint32 (%zu bytes); %d steps after %d warm-up\n", o.count, o.count * sizeof(uint32_t),
         o.iters, o.warmup);
  int k = 0;
  for (; k < o.warmup; k++) step(comms, r, n, o.count, k);
  sync_all(r, n);
  double t0 = now_us();
  for (int end = k + o.iters; k < end; k++) step(comms, r, n, o.count, k);
  sync_all(r, n);
  double us = (now_us() - t0) / o.iters;
  double gbs = us > 0 ? (double)o.count * sizeof(uint32_t) / us / 1e3 : 0;
  printf("time/step %.2f us, %.2f GB/s per rank (one block each way)\n", us, gbs);

  for (int i = 0; i < n; i++) {
    ncclResult_t async;
    NCCL_CHECK(comms[i], ncclCommGetAsyncError(comms[i], &async));
    if (async != ncclSuccess) {
      fprintf(stderr, "ring: rank %d: %s (%s)\n", i, ncclGetErrorString(async), ncclGetLastError(comms[i]));
      return 1;
    }
  }
  int pass = check(r, n, o.count, k);
  for (int i = 0; i < n; i++) {
    CUDA_CHECK(cudaSetDevice(r[i].dev));
    for (int b = 0; b < 2; b++) CUDA_CHECK(cudaFree(r[i].buf[b]));
    CUDA_CHECK(cudaStreamDestroy(r[i].stream));
    NCCL_CHECK(comms[i], ncclCommDestroy(comms[i]));
  }
  return pass ? 0 : 1;
}
