/*
 * test_reset.c - communicators made again after cudaDeviceReset (run under
 * mpirun with 1, 2, 4 and 8 ranks).  A program may destroy its communicators,
 * reset its device and make new ones; what the library keeps per process
 * and device (streams, events, counters, stages, IPC exports and imports,
 * ncclMemAlloc records) must then be made anew, not used stale.  Each
 * round moves data on a ring (small, medium and large messages), between
 * two ranks of this process (ncclCommInitAll with the device repeated) and
 * by put and signal into windows, checking every byte.  Last, a
 * communicator that lives through a reset is failed, not run on the dead
 * context.  Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpinccl.h"
#include "pattern.h"

static int world_rank, world_size, dev, failures, round_now;

#define EXPECT(cond)                                                                                                \
  do {                                                                                                              \
    if (!(cond)) {                                                                                                  \
      fprintf(stderr, "[world %d] %s:%d: round %d: expected %s (last error: %s)\n", world_rank, __FILE__, __LINE__, \
              round_now, #cond, ncclGetLastError(NULL));                                                            \
      failures++;                                                                                                   \
    }                                                                                                               \
  } while (0)
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

static uint32_t seed(int src, int dst, int what) {
  return 0x9e3779b9u * (uint32_t)(round_now + 1) + 7919u * (uint32_t)src + 104729u * (uint32_t)dst + (uint32_t)what;
}

/* A ring shift of bytes over comm: send to the next rank, receive from the
 * previous one, in one group; then the data is checked. */
static void ring(ncclComm_t comm, cudaStream_t s, size_t bytes, int what) {
  int me, n;
  EXPECT_OK(ncclCommUserRank(comm, &me));
  EXPECT_OK(ncclCommCount(comm, &n));
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  void *sbuf = NULL, *rbuf = NULL;
  EXPECT(cudaMalloc(&sbuf, bytes) == cudaSuccess && cudaMalloc(&rbuf, bytes) == cudaSuccess);
  if (sbuf == NULL || rbuf == NULL) return;
  pattern_fill(sbuf, bytes, seed(me, next, what), s);
  cudaMemsetAsync(rbuf, 0, bytes, s);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(sbuf, bytes, ncclUint8, next, comm, s));
  EXPECT_OK(ncclRecv(rbuf, bytes, ncclUint8, prev, comm, s));
  EXPECT_OK(ncclGroupEnd());
  unsigned long long wrong = pattern_check(rbuf, bytes, seed(prev, me, what), s);
  if (wrong)
    fprintf(stderr, "[world %d] round %d: ring of %zu bytes: %llu wrong\n", world_rank, round_now, bytes, wrong);
  EXPECT(wrong == 0);
  cudaFree(sbuf);
  cudaFree(rbuf);
}

/* A put of bytes with a signal into the next rank's window, a wait for the
 * previous rank's, then the data is checked. */
static void put_ring(ncclComm_t comm, cudaStream_t s, size_t bytes) {
  int me, n;
  EXPECT_OK(ncclCommUserRank(comm, &me));
  EXPECT_OK(ncclCommCount(comm, &n));
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  void *src = NULL, *win_mem = NULL;
  EXPECT(cudaMalloc(&src, bytes) == cudaSuccess);
  EXPECT_OK(ncclMemAlloc(&win_mem, bytes));
  if (src == NULL || win_mem == NULL) return;
  /* (cudaMemset runs on the legacy stream, which s does not wait for: done
   * before the peer may put, or it could clear the put's data) */
  EXPECT(cudaMemset(win_mem, 0, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
  ncclWindow_t win = NULL;
  EXPECT_OK(ncclCommWindowRegister(comm, win_mem, bytes, &win, NCCL_WIN_DEFAULT));
  if (win == NULL) return;
  pattern_fill(src, bytes, seed(me, next, 9), s);
  EXPECT_OK(ncclPutSignal(src, bytes, ncclUint8, next, win, 0, 0, 0, 0, comm, s));
  ncclWaitSignalDesc_t desc = {.opCnt = 1, .peer = prev, .sigIdx = 0, .ctx = 0};
  EXPECT_OK(ncclWaitSignal(1, &desc, comm, s));
  unsigned long long wrong = pattern_check(win_mem, bytes, seed(prev, me, 9), s);
  if (wrong)
    fprintf(stderr, "[world %d] round %d: put of %zu bytes: %llu wrong\n", world_rank, round_now, bytes, wrong);
  EXPECT(wrong == 0);
  /* (no rank deregisters while a peer may still put into its window) */
  EXPECT_OK(ncclCommWindowDeregister(comm, win));
  EXPECT_OK(ncclMemFree(win_mem));
  cudaFree(src);
}

/* Two ranks of this process on its device exchange a message each way. */
static void pair_here(void) {
  int devs[2] = {dev, dev};
  ncclComm_t comms[2] = {NULL, NULL};
  EXPECT_OK(ncclCommInitAll(comms, 2, devs));
  if (comms[0] == NULL || comms[1] == NULL) return;
  const size_t bytes = 1 << 20;
  void *sbuf[2] = {NULL, NULL}, *rbuf[2] = {NULL, NULL};
  cudaStream_t s[2];
  for (int r = 0; r < 2; r++) {
    cudaStreamCreate(&s[r]);
    cudaMalloc(&sbuf[r], bytes);
    cudaMalloc(&rbuf[r], bytes);
    pattern_fill(sbuf[r], bytes, seed(r, 1 - r, 5), s[r]);
    cudaMemsetAsync(rbuf[r], 0, bytes, s[r]);
    cudaStreamSynchronize(s[r]);
  }
  EXPECT_OK(ncclGroupStart());
  for (int r = 0; r < 2; r++) {
    EXPECT_OK(ncclSend(sbuf[r], bytes, ncclUint8, 1 - r, comms[r], s[r]));
    EXPECT_OK(ncclRecv(rbuf[r], bytes, ncclUint8, 1 - r, comms[r], s[r]));
  }
  EXPECT_OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++) {
    EXPECT(pattern_check(rbuf[r], bytes, seed(1 - r, r, 5), s[r]) == 0);
    EXPECT_OK(ncclCommDestroy(comms[r]));
    cudaFree(sbuf[r]);
    cudaFree(rbuf[r]);
    cudaStreamDestroy(s[r]);
  }
}

static void one_round(void) {
  ncclComm_t comm = NULL;
  EXPECT_OK(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL));
  if (comm == NULL) return;
  cudaStream_t s;
  EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  ring(comm, s, 8, 1);
  ring(comm, s, 64 << 10, 2);
  ring(comm, s, 8 << 20, 3);
  put_ring(comm, s, 1 << 20);
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
  ncclResult_t async = ncclInternalError;
  EXPECT_OK(ncclCommGetAsyncError(comm, &async));
  EXPECT(async == ncclSuccess);
  EXPECT_OK(ncclCommDestroy(comm));
  cudaStreamDestroy(s);
  pair_here();
  /* Every rank is past its communicator's end before any device is reset:
   * a peer's import of this rank's memory must not outlive the memory. */
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A communicator that lives through a reset (a program's mistake) is failed
 * when the next one is made on the device: its calls are refused with
 * ncclInvalidUsage, never run on the dead context, and it can be
 * destroyed. */
static void survivor(void) {
  ncclComm_t old = NULL, fresh = NULL;
  EXPECT_OK(mpincclCommInitMPI(&old, MPI_COMM_WORLD, NULL));
  if (old == NULL) return;
  /* (No work on it before the reset: between the reset and the next
   * creation the library's threads may still touch what such work leaves,
   * as CUDA forbids; README, cudaDeviceReset.) */
  void *kept = NULL, *after = NULL; /* ncclMemAlloc memory the reset takes */
  EXPECT_OK(ncclMemAlloc(&kept, 1 << 20));
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT(cudaDeviceReset() == cudaSuccess);
  EXPECT(cudaSetDevice(dev) == cudaSuccess);
  pattern_forget();
  /* Memory allocated since may have the old address: freeing the old
   * pointer must not free it. */
  EXPECT_OK(ncclMemAlloc(&after, 1 << 20));
  EXPECT_OK(ncclMemFree(kept));
  EXPECT(ncclMemFree(kept) == ncclInvalidArgument);
  EXPECT(cudaMemset(after, 1, 1 << 20) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
  EXPECT_OK(ncclMemFree(after));
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_OK(mpincclCommInitMPI(&fresh, MPI_COMM_WORLD, NULL));
  ncclResult_t async = ncclSuccess;
  EXPECT_OK(ncclCommGetAsyncError(old, &async));
  EXPECT(async == ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(old), "was reset") != NULL);
  void* buf = NULL;
  cudaMalloc(&buf, 64);
  EXPECT(ncclSend(buf, 64, ncclUint8, (world_rank + 1) % world_size, old, cudaStreamLegacy) == ncclInvalidUsage);
  if (fresh) {
    cudaStream_t s;
    cudaStreamCreate(&s);
    ring(fresh, s, 4096, 7);
    EXPECT_OK(ncclCommDestroy(old)); /* (between two uses of the new one: nothing of it given back) */
    ring(fresh, s, 4096, 8);
    ring(fresh, s, 1 << 20, 8);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    EXPECT_OK(ncclCommDestroy(fresh));
  } else {
    EXPECT_OK(ncclCommDestroy(old));
  }
  cudaFree(buf);
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("1 2 4 8");
    return 0;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (world_rank == 0) printf("test_reset: no GPU: SKIP\n");
    MPI_Finalize();
    return 77;
  }
  MPI_Comm node;
  int local_rank;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_free(&node);
  dev = local_rank % ndev;
  cudaSetDevice(dev);
  for (round_now = 0; round_now < 3; round_now++) {
    one_round();
    if (round_now == 2) break;
    /* Rounds 1 and 2 run after a reset of this process's device. */
    EXPECT(cudaDeviceReset() == cudaSuccess);
    EXPECT(cudaSetDevice(dev) == cudaSuccess);
    pattern_forget(); /* (the test's own counters went with the context too) */
    MPI_Barrier(MPI_COMM_WORLD);
  }
  round_now = 3;
  survivor();
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf("test_reset: %d ranks, %d failures\n", world_size, total);
  MPI_Finalize();
  return total ? 1 : 0;
}
