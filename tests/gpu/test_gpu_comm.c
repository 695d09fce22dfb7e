/*
 * test_gpu_comm.c - communicators on a GPU (run under mpirun with 1, 2 and 4
 * ranks; on the one-GPU machine all ranks share it): creation from a unique
 * id, ncclCommInitAll with a repeated device and at the groups' nesting
 * limit, split, the MPI_Comm extension
 * and non-blocking creation, checking devices, the ranks found sharing the
 * GPU, MPS detection and the transport chosen per peer, and that finalize
 * and destroy wait for the communicator's work, and that the program's own
 * CUDA error stays unread across the library's calls.  Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/drain.h"
#include "core/group.h"
#include "mpinccl.h"
#include "pattern.h"
#include "transport.h"

static int world_rank, world_size, local_rank, local_size, ndev, failures;

#define EXPECT(cond) \
  do { \
    if (!(cond)) { \
      fprintf(stderr, "[world %d] %s:%d: expected %s (last error: %s)\n", world_rank, __FILE__, \
              __LINE__, #cond, ncclGetLastError(NULL)); \
      failures++; \
    } \
  } while (0)
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

/* Ranks of comm on rank r's GPU, from what every process knows of its device. */
static void expect_gpu_sharing(ncclComm_t comm, int expect_same_gpu) {
  int dev = -1;
  EXPECT_OK(ncclCommCuDevice(comm, &dev));
  int cur;
  cudaGetDevice(&cur);
  EXPECT(dev == cur);
  EXPECT(comm->topo.n_same_gpu == expect_same_gpu);
  int mps = 0;
  cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, dev);
  EXPECT(comm->topo.ranks[comm->rank].mps == (mps != 0));
  EXPECT(strlen(comm->topo.ranks[comm->rank].pci_bus) >= 12);
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    int same_proc = comm->topo.ranks[p].proc == comm->topo.ranks[comm->rank].proc;
    int kind = comm->transport[p];
    if (getenv("MPINCCL_TRANSPORT") == NULL && getenv("NCCL_P2P_DISABLE") == NULL)
      EXPECT(kind == (same_proc ? MPN_TRANSPORT_LOCAL : MPN_TRANSPORT_IPC));
  }
}

static void test_unique_id(void) {
  ncclUniqueId id;
  if (world_rank == 0) EXPECT_OK(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  EXPECT_OK(ncclCommInitRank(&comm, world_size, id, world_rank));
  /* Processes on this host with the same device ordinal share a GPU. */
  int same = 0;
  for (int l = 0; l < local_size; l++) same += l % ndev == local_rank % ndev;
  expect_gpu_sharing(comm, same);
  ncclComm_t sub;
  EXPECT_OK(ncclCommSplit(comm, world_rank % 2, world_rank, &sub, NULL));
  int n, r, d;
  EXPECT_OK(ncclCommCount(sub, &n));
  EXPECT_OK(ncclCommUserRank(sub, &r));
  EXPECT_OK(ncclCommCuDevice(sub, &d));
  EXPECT(n == (world_size + 1 - world_rank % 2) / 2 && r == world_rank / 2);
  EXPECT(d == local_rank % ndev);
  EXPECT_OK(ncclCommDestroy(sub));
  EXPECT_OK(ncclCommDestroy(comm));
}

/* Several ranks of this process on one device, which NCCL refuses. */
static void test_init_all_repeated(void) {
  int dev = local_rank % ndev, devs[3] = {dev, dev, dev};
  ncclComm_t comms[3];
  EXPECT_OK(ncclCommInitAll(comms, 3, devs));
  for (int i = 0; i < 3; i++) {
    int n, r, d;
    EXPECT_OK(ncclCommCount(comms[i], &n));
    EXPECT_OK(ncclCommUserRank(comms[i], &r));
    EXPECT_OK(ncclCommCuDevice(comms[i], &d));
    EXPECT(n == 3 && r == i && d == dev);
    EXPECT(comms[i]->topo.n_same_gpu == 3 && comms[i]->topo.n_same_process == 3);
    for (int p = 0; p < 3; p++)
      EXPECT(comms[i]->transport[p] == (p == i ? MPN_TRANSPORT_SELF : MPN_TRANSPORT_LOCAL));
  }
  /* Split the clique from one thread, in a group. */
  ncclComm_t sub[3];
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < 3; i++) EXPECT_OK(ncclCommSplit(comms[i], i == 1 ? NCCL_SPLIT_NOCOLOR : 0, 0, &sub[i], NULL));
  EXPECT_OK(ncclGroupEnd());
  EXPECT(sub[1] == NULL);
  int n;
  EXPECT_OK(ncclCommCount(sub[2], &n));
  EXPECT(n == 2);
  EXPECT_OK(ncclCommDestroy(sub[0]));
  EXPECT_OK(ncclCommDestroy(sub[2]));
  for (int i = 0; i < 3; i++) EXPECT_OK(ncclCommDestroy(comms[i]));
  int cur;
  cudaGetDevice(&cur);
  EXPECT(cur == dev); /* InitAll restores the caller's device */
}

/* ncclCommInitAll inside groups nested as deep as they may be: its own
 * group start is refused, so it creates nothing, and the caller's groups
 * still need every one of their ends (the last reports the failure). */
static void test_init_all_nested_limit(void) {
  int dev = local_rank % ndev, refused = 0;
  for (int i = 0; i < MPN_GROUP_MAX_DEPTH; i++) refused += ncclGroupStart() != ncclSuccess;
  EXPECT(refused == 0);
  ncclComm_t comm = NULL;
  EXPECT(ncclCommInitAll(&comm, 1, &dev) == ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(NULL), "nested 1048576 deep") != NULL);
  for (int i = 1; i < MPN_GROUP_MAX_DEPTH; i++) refused += ncclGroupEnd() != ncclSuccess;
  EXPECT(refused == 0);
  EXPECT(ncclGroupEnd() == ncclInvalidUsage); /* the outermost: the group failed */
  EXPECT(comm == NULL);
  EXPECT(ncclGroupEnd() == ncclInvalidUsage);
  EXPECT(strstr(ncclGetLastError(NULL), "no ncclGroupStart is open") != NULL);
  int cur = -1;
  cudaGetDevice(&cur);
  EXPECT(cur == dev);
}

static void CUDART_CB sleep_20ms(void* arg) {
  (void)arg;
  usleep(20000);
}

/* Sets an error of the program's own (cudaErrorInvalidDevice) that it has
 * not read yet, for expect_error_kept after the library's calls. */
static void program_error_set(void) { EXPECT(cudaSetDevice(ndev + 7) == cudaErrorInvalidDevice); }

static void expect_error_kept(const char* step) {
  cudaError_t kept = cudaGetLastError();
  if (kept != cudaErrorInvalidDevice)
    fprintf(stderr, "[world %d] %s: the program's error became %s\n", world_rank, step, cudaGetErrorName(kept));
  EXPECT(kept == cudaErrorInvalidDevice);
}

/* Windows of the pair c, registered and deregistered in a group each (one
 * thread drives both ranks), with a put and signal each way between. */
static void error_kept_windows(ncclComm_t c[2], cudaStream_t s) {
  size_t bytes = 65536;
  void *buf[2] = {NULL, NULL}, *src = NULL;
  ncclWindow_t w[2] = {NULL, NULL};
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclMemAlloc(&buf[i], bytes));
  EXPECT_OK(ncclMemAlloc(&src, bytes));
  program_error_set();
  EXPECT_OK(ncclGroupStart());
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommWindowRegister(c[i], buf[i], bytes, &w[i], 0));
  EXPECT_OK(ncclGroupEnd());
  expect_error_kept("window registration");
  EXPECT(w[0] != NULL && w[1] != NULL);
  if (w[0] && w[1]) {
    EXPECT_OK(ncclGroupStart());
    for (int i = 0; i < 2; i++) {
      ncclWaitSignalDesc_t d = {1, 1 - i, 0, 0};
      EXPECT_OK(ncclPutSignal(src, bytes, ncclInt8, 1 - i, w[i], 0, 0, 0, 0, c[i], s));
      EXPECT_OK(ncclWaitSignal(1, &d, c[i], s));
    }
    EXPECT_OK(ncclGroupEnd());
    EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
    program_error_set();
    EXPECT_OK(ncclGroupStart());
    for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommWindowDeregister(c[i], w[i]));
    EXPECT_OK(ncclGroupEnd());
    expect_error_kept("window deregistration");
  }
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclMemFree(buf[i]));
  EXPECT_OK(ncclMemFree(src));
}

/* A pair made for the step, one exchange (two-hop, 1 MiB), then destroyed. */
static void error_kept_destroy(int dev, cudaStream_t s, char* buf) {
  int devs[2] = {dev, dev};
  ncclComm_t d[2];
  EXPECT_OK(ncclCommInitAll(d, 2, devs));
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(buf, 1 << 20, ncclInt8, 1, d[0], s));
  EXPECT_OK(ncclRecv(buf + (1 << 20), 1 << 20, ncclInt8, 0, d[1], s));
  EXPECT_OK(ncclGroupEnd());
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
  program_error_set();
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommDestroy(d[i]));
  expect_error_kept("ncclCommDestroy");
}

/* A CUDA error of the program's own that it has not read yet stays for its
 * cudaGetLastError whatever the library's calls in between: ncclMemAlloc,
 * ncclMemFree, a group of two ranks of this process, windows registered
 * and deregistered, and ncclCommDestroy.  First the premise the library
 * relies on: a query's cudaErrorNotReady is not recorded as the last error. */
static void test_program_error_kept(void) {
  cudaStream_t s;
  EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t ev;
  EXPECT(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess);
  EXPECT(cudaLaunchHostFunc(s, sleep_20ms, NULL) == cudaSuccess);
  EXPECT(cudaEventRecord(ev, s) == cudaSuccess);
  EXPECT(cudaEventQuery(ev) == cudaErrorNotReady);
  EXPECT(cudaPeekAtLastError() == cudaSuccess);
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
  int dev = local_rank % ndev, devs[2] = {dev, dev};
  ncclComm_t c[2];
  EXPECT_OK(ncclCommInitAll(c, 2, devs));
  char* buf = NULL;
  EXPECT(cudaMalloc((void**)&buf, 2 << 20) == cudaSuccess);
  static const char* const steps[3] = {"ncclMemAlloc and ncclMemFree", "a two-hop group", "an inbox group"};
  for (int step = 0; step < 3; step++) {
    program_error_set();
    void* p = NULL;
    if (step == 0) {
      EXPECT_OK(ncclMemAlloc(&p, 1 << 20));
      EXPECT_OK(ncclMemFree(p));
    } else { /* two-hop (1 MiB), then through the inbox (4 KiB) */
      size_t bytes = step == 1 ? 1 << 20 : 4096;
      EXPECT_OK(ncclGroupStart());
      EXPECT_OK(ncclSend(buf, bytes, ncclInt8, 1, c[0], s));
      EXPECT_OK(ncclRecv(buf + (1 << 20), bytes, ncclInt8, 0, c[1], s));
      EXPECT_OK(ncclGroupEnd());
      EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
    }
    expect_error_kept(steps[step]);
  }
  error_kept_windows(c, s);
  error_kept_destroy(dev, s, buf);
  cudaFree(buf);
  for (int i = 0; i < 2; i++) EXPECT_OK(ncclCommDestroy(c[i]));
  cudaEventDestroy(ev);
  cudaStreamDestroy(s);
}

static void test_mpi_comm_nonblocking(void) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm;
  ncclResult_t res = mpincclCommInitMPI(&comm, MPI_COMM_WORLD, &cfg);
  EXPECT(res == ncclInProgress || res == ncclSuccess);
  ncclResult_t state;
  do {
    EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  } while (state == ncclInProgress);
  EXPECT(state == ncclSuccess);
  int r;
  EXPECT_OK(ncclCommUserRank(comm, &r));
  EXPECT(r == world_rank);
  int same = 0;
  for (int l = 0; l < local_size; l++) same += l % ndev == local_rank % ndev;
  expect_gpu_sharing(comm, same);
  MPI_Comm back;
  EXPECT_OK(mpincclCommGetMPIComm(comm, &back));
  EXPECT(back == MPI_COMM_WORLD);
  EXPECT_OK(ncclCommDestroy(comm));
}

/* Until the communicator says it is ready (non-blocking creation). */
static void await_ready(ncclComm_t comm) {
  ncclResult_t state;
  do {
    EXPECT_OK(ncclCommGetAsyncError(comm, &state));
  } while (state == ncclInProgress);
  EXPECT(state == ncclSuccess);
}

enum { END_DESTROY, END_FINALIZE, END_FINALIZE_NONBLOCKING, END_STREAM_GONE };

/* Once both sides of a pair are set up (here: after a group with the peer
 * and a barrier), its file is gone from /dev/shm, so that a process killed
 * later leaves none behind; the mapping stays. */
static void expect_no_pair_files(ncclComm_t comm, int next, int prev) {
  MPI_Barrier(MPI_COMM_WORLD);
  int peers[2][2] = {{comm->rank, next}, {prev, comm->rank}};
  for (int i = 0; i < 2; i++) {
    int peer = i == 0 ? next : prev;
    if (comm->transport[peer] != MPN_TRANSPORT_IPC) continue;
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/mpinccl-%016llx-%d-%d", (unsigned long long)comm->bootstrap->key,
             peers[i][0], peers[i][1]);
    int left = access(path, F_OK) == 0;
    if (left) fprintf(stderr, "[world %d] %s is still there\n", world_rank, path);
    EXPECT(!left);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/*
 * ncclCommFinalize and ncclCommDestroy return only once the streams have run
 * what the communicator enqueued (NCCL's destroy finalizes, which flushes its
 * operations): each rank's stream is kept busy for 200 ms, then a ring
 * exchange is enqueued and the communicator ended at once.  When the call
 * returns, the stream must be idle and the data there; freed pair memory
 * under a running exchange would fault or hang instead.  END_STREAM_GONE
 * destroys the stream before the communicator.  8 MiB go by copies between
 * memory operations (the finalize's mark an event), 4 KiB under MPS by the
 * flag kernel (the mark a word the kernel sets); the counts are printed.
 */
static void test_end_waits(int how, size_t bytes) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = how == END_FINALIZE_NONBLOCKING ? 0 : 1;
  ncclComm_t comm;
  ncclResult_t res = mpincclCommInitMPI(&comm, MPI_COMM_WORLD, &cfg);
  EXPECT(res == ncclSuccess || res == ncclInProgress);
  await_ready(comm);
  cudaStream_t s;
  void *sb = NULL, *rb = NULL;
  EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaMalloc(&sb, bytes) == cudaSuccess && cudaMalloc(&rb, bytes) == cudaSuccess);
  int next = (world_rank + 1) % world_size, prev = (world_rank + world_size - 1) % world_size;
  pattern_fill(sb, bytes, 700 + world_rank, s);
  EXPECT(cudaMemsetAsync(rb, 0, bytes, s) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(s) == cudaSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  gpu_busy(200000, s);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(sb, bytes, ncclChar, next, comm, s));
  EXPECT_OK(ncclRecv(rb, bytes, ncclChar, prev, comm, s));
  res = ncclGroupEnd();
  EXPECT(res == ncclSuccess || (how == END_FINALIZE_NONBLOCKING && res == ncclInProgress));
  if (how == END_FINALIZE_NONBLOCKING) await_ready(comm);
  expect_no_pair_files(comm, next, prev);
  if (how == END_FINALIZE) EXPECT_OK(ncclCommFinalize(comm));
  if (how == END_FINALIZE_NONBLOCKING) {
    res = ncclCommFinalize(comm);
    EXPECT(res == ncclSuccess || res == ncclInProgress);
    await_ready(comm);
  }
  if (how == END_FINALIZE || how == END_FINALIZE_NONBLOCKING) EXPECT(cudaStreamQuery(s) == cudaSuccess);
  if (how == END_STREAM_GONE) {
    EXPECT(cudaStreamDestroy(s) == cudaSuccess);
    s = NULL;
  }
  uint64_t by_event, by_kernel;
  mpn_drain_counts(comm, &by_event, &by_kernel);
  if (world_rank == 0)
    printf("test_gpu_comm: end mode %d, %zu bytes: finalize marks %llu by events, %llu by words\n", how, bytes,
           (unsigned long long)by_event, (unsigned long long)by_kernel);
  EXPECT(by_event + by_kernel >= 1);
  EXPECT_OK(ncclCommDestroy(comm));
  if (s) EXPECT(cudaStreamQuery(s) == cudaSuccess);
  cudaStream_t check = s;
  if (check == NULL) EXPECT(cudaStreamCreateWithFlags(&check, cudaStreamNonBlocking) == cudaSuccess);
  unsigned long long wrong = pattern_check(rb, bytes, 700 + prev, check);
  if (wrong) fprintf(stderr, "[world %d] end mode %d: %llu bytes wrong\n", world_rank, how, wrong);
  EXPECT(wrong == 0);
  EXPECT(cudaStreamDestroy(check) == cudaSuccess);
  cudaFree(sb);
  cudaFree(rb);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("1 2 4");
    return 0;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (world_rank == 0) printf("test_gpu_comm: no GPU: SKIP\n");
    MPI_Finalize();
    return 77;
  }
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  cudaSetDevice(local_rank % ndev);
  test_unique_id();
  test_init_all_repeated();
  test_init_all_nested_limit();
  test_mpi_comm_nonblocking();
  test_program_error_kept();
  for (int how = END_DESTROY; how <= END_STREAM_GONE; how++) {
    test_end_waits(how, 8u << 20);
    test_end_waits(how, 4096);
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf("test_gpu_comm: %d ranks, %d GPU(s), %d failures\n", world_size, ndev, total);
  MPI_Finalize();
  return total ? 1 : 0;
}
