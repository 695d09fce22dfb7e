/*
 * test_device_fail.c - a rank whose creation cannot set its CUDA device
 * (mpincclCommInitMPI, ncclCommSplit with and without a color, also a
 * non-blocking one without: through its parent where it ran in the
 * background) gets that failure, and its peers are told at once
 * (ncclRemoteError naming it), not at MPINCCL_BOOTSTRAP_TIMEOUT
 * (ncclTimeout); a split on its parent's device leaves the caller's
 * current device as it was.  No GPU: the device
 * calls are stand-ins, wrapped at link time (Makefile.am).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "mpi_test.h"
#include "mpinccl.h"

static int world_rank, world_size;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "world", world_rank, "last error: ")
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

/* The rank that cannot set its device; the deadline of a set-up wait, and
 * the time within which a told peer must have returned (well below it). */
enum { FAULTY = 1, TIMEOUT_S = 5, PROMPT_S = 3 };

/* Set: rank FAULTY's current device is 0 and setting it fails.  Clear, and
 * on every other rank: no device, so that communicators are host-only
 * (a parent made before the fault must be). */
static int faulty;

/* Set: the calling thread's current device is modelled (current_dev),
 * for CUDA's own calls too. */
static int modelled, current_dev;

cudaError_t __real_cudaGetDevice(int* dev);
cudaError_t __real_cudaSetDevice(int dev);

cudaError_t __wrap_cudaGetDevice(int* dev) {
  if (!modelled) return __real_cudaGetDevice(dev);
  *dev = current_dev;
  return cudaSuccess;
}

cudaError_t __wrap_cudaSetDevice(int dev) {
  if (!modelled) return __real_cudaSetDevice(dev);
  current_dev = dev;
  return cudaSuccess;
}

int __wrap_mpn_cuda_current_device(void) {
  if (modelled) return current_dev;
  return faulty && world_rank == FAULTY ? 0 : -1;
}

ncclResult_t __wrap_mpn_cuda_set_device(int dev) {
  if (modelled) current_dev = dev;
  if (!faulty || world_rank != FAULTY) return ncclSuccess;
  return mpn_error_set(NULL, ncclUnhandledCudaError, "cudaSetDevice(%d) failed: no CUDA-capable device (stand-in)",
                       dev);
}

/* Where CUDA finds a GPU, a creation starts its device's context first:
 * device 0 is the stand-in's. */
void __wrap_mpn_cuda_context_start(int dev) { (void)dev; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One creation's outcome (res and the error text, secs seconds after its
 * call): rank FAULTY gets its device's failure; the others, its peers in
 * the new communicator (whose rank FAULTY is world's: keys follow world
 * ranks), are told at once that it could not set its device. */
static void expect_told(ncclResult_t res, const char* text, double secs) {
  if (world_rank == FAULTY) {
    EXPECT(res == ncclUnhandledCudaError);
    EXPECT(strstr(text, "cudaSetDevice(0) failed") != NULL);
    return;
  }
  EXPECT(res == ncclRemoteError);
  EXPECT(strstr(text, "rank 1 could not set its CUDA device") != NULL);
  EXPECT(secs < PROMPT_S);
}

/* A communicator of all world ranks, over a duplicate of MPI_COMM_WORLD
 * (the set-up a rank left unmatched stays pending on that one alone);
 * non-blocking, the failure is the communicator's to report. */
static void test_init_mpi(int blocking) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = blocking;
  faulty = 1;
  ncclComm_t comm = (ncclComm_t)0x1;
  double start = now_s();
  ncclResult_t res = mpincclCommInitMPI(&comm, dup, &cfg);
  if (blocking) {
    expect_told(res, ncclGetLastError(NULL), now_s() - start);
    EXPECT(comm == NULL);
  } else {
    EXPECT(res == ncclInProgress);
    while (res == ncclInProgress && ncclCommGetAsyncError(comm, &res) == ncclSuccess) continue;
    expect_told(res, ncclGetLastError(comm), now_s() - start);
    EXPECT_OK(ncclCommDestroy(comm));
  }
  faulty = 0;
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* How rank FAULTY splits: blocking; non-blocking, run in the call (its
 * parent has no other rank in this process, below MPI_THREAD_MULTIPLE);
 * non-blocking, run in the background (its parent said to have two ranks
 * here: a thread of its own, whose MPI work the parent's polls do). */
enum { SPLIT_BLOCKING, SPLIT_INLINE, SPLIT_BACKGROUND };

/* Rank FAULTY's split without a color, not blocking: its failure, which
 * no communicator of its own keeps, is the call's (run in it) or, run in
 * the background, the parent's asynchronous error once
 * ncclCommGetAsyncError stops answering ncclInProgress, with the device's
 * text.  faulty stays set until then: the thread sets the device. */
static void expect_nocolor_failure(ncclComm_t parent, ncclResult_t res, int how) {
  if (how == SPLIT_BACKGROUND) {
    EXPECT(res == ncclInProgress);
    while (res == ncclInProgress && ncclCommGetAsyncError(parent, &res) == ncclSuccess) continue;
  }
  EXPECT(res == ncclUnhandledCudaError);
  const char* text = ncclGetLastError(how == SPLIT_BACKGROUND ? parent : NULL);
  EXPECT(strstr(text, "cudaSetDevice(0) failed") != NULL);
}

/* A split of a host-only parent; rank FAULTY splits with faulty_color, how
 * says, the others with color 0, blocking.  A split's device is its
 * parent's: rank FAULTY's parent says device 0 for the split's call. */
static void test_split(int faulty_color, int how) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  ncclComm_t parent = NULL;
  EXPECT_OK(mpincclCommInitMPI(&parent, dup, NULL));
  if (parent == NULL) MPI_Abort(MPI_COMM_WORLD, 1); /* (its peers would wait in the split) */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = how == SPLIT_BLOCKING;
  int nocolor_here = faulty_color == NCCL_SPLIT_NOCOLOR && world_rank == FAULTY;
  if (world_rank == FAULTY) parent->cuda_dev = 0;
  if (world_rank == FAULTY && how == SPLIT_BACKGROUND) parent->topo.n_same_process = 2;
  faulty = 1;
  ncclComm_t child = (ncclComm_t)0x1;
  double start = now_s();
  ncclResult_t res = ncclCommSplit(parent, world_rank == FAULTY ? faulty_color : 0, world_rank, &child,
                                   world_rank == FAULTY ? &cfg : NULL);
  double secs = now_s() - start;
  if (nocolor_here && how != SPLIT_BLOCKING) {
    EXPECT(child == NULL);
    expect_nocolor_failure(parent, res, how);
  }
  faulty = 0;
  parent->cuda_dev = -1;
  parent->topo.n_same_process = 1;
  if (faulty_color == NCCL_SPLIT_NOCOLOR && world_rank != FAULTY) { /* not its communicator: made at once */
    int n = 0;
    EXPECT_OK(res);
    EXPECT(secs < PROMPT_S);
    EXPECT_OK(ncclCommCount(child, &n));
    EXPECT(n == world_size - 1);
    EXPECT_OK(ncclCommDestroy(child));
  } else if (!nocolor_here || how == SPLIT_BLOCKING) {
    expect_told(res, ncclGetLastError(NULL), secs);
    EXPECT(child == NULL);
  }
  EXPECT_OK(ncclCommDestroy(parent));
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* A split on its parent's device, another than the caller's current one:
 * as NCCL's, it leaves the caller's current device as it was (it was left
 * on the parent's, where the caller's next allocation then went).  Every
 * rank splits without a color: nothing is made on the stand-in device. */
static void test_split_keeps_device(void) {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  ncclComm_t parent = NULL;
  EXPECT_OK(mpincclCommInitMPI(&parent, dup, NULL));
  if (parent == NULL) MPI_Abort(MPI_COMM_WORLD, 1); /* (its peers would wait in the split) */
  parent->cuda_dev = 1;
  modelled = 1;
  current_dev = 0;
  ncclComm_t child = (ncclComm_t)0x1;
  EXPECT_OK(ncclCommSplit(parent, NCCL_SPLIT_NOCOLOR, world_rank, &child, NULL));
  int after = current_dev;
  modelled = 0;
  parent->cuda_dev = -1;
  EXPECT(child == NULL);
  EXPECT(after == 0);
  EXPECT_OK(ncclCommDestroy(parent));
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("2 3");
    return 0;
  }
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  char timeout[16];
  snprintf(timeout, sizeof(timeout), "%d", TIMEOUT_S);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", timeout, 1);
  EXPECT_OK(mpn_params_reload());
  test_init_mpi(1);
  test_init_mpi(0);
  test_split(0, SPLIT_BLOCKING);
  test_split(NCCL_SPLIT_NOCOLOR, SPLIT_BLOCKING);
  test_split(NCCL_SPLIT_NOCOLOR, SPLIT_INLINE);
  test_split(NCCL_SPLIT_NOCOLOR, SPLIT_BACKGROUND);
  test_split_keeps_device();
  return mpi_test_finish(world_rank, "test_device_fail: %d ranks, ", world_size);
}
