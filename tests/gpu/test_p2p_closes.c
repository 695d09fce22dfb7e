/*
 * test_p2p_closes.c - test_p2p's steps around the closes of CUDA IPC
 * imports (docs/P2P.md, known problem 17): a new buffer over a freed one
 * the peer still maps, and a launch while a close waits for a stream of the
 * application's.  Every received byte is checked against its sender's
 * pattern.
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/topo.h"
#include "cuda/ipc.h"
#include "cuda/ipc_closer.h"
#include "cuda/ipc_held.h"
#include "harness.h"
#include "mpinccl.h"
#include "p2p/side.h"
#include "pattern.h"
#include "test_p2p.h"

/* Rank 0 sends buf to rank 1, posting first; both streams synchronized after. */
static void in_the_way_send(ncclComm_t pair, MPI_Comm two, const void* s, size_t bytes) {
  if (rank == 0) EXPECT_OK(ncclSend(s, bytes, ncclInt8, 1, pair, stream));
  MPI_Barrier(two); /* rank 0 posted first: rank 1 maps its buffer */
  if (rank == 1) EXPECT_OK(ncclRecv((void*)s, bytes, ncclInt8, 0, pair, stream));
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  MPI_Barrier(two);
}

/*
 * A new buffer over a freed one the peer still maps (docs/P2P.md, known
 * problem 17): rank 1 maps rank 0's q; rank 0 frees q and allocates a
 * larger s, which the allocator may place over q.  Where rank 1's list of
 * held imports shows q in s's way, rank 0 sends s through a stage (rank 1
 * could not map s until it closed q, and that close may wait for its GPU
 * work); either way the data arrives.
 */
void in_the_way(void) {
  if (nranks < 2 || harness_over_ucx()) return;
  enum { SMALL = 1 << 20, LARGE = 3 << 19 }; /* above the inbox's big slots: buffers are shared */
  MPI_Comm two;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
  if (rank > 1) return;
  ncclComm_t pair = NULL;
  EXPECT_OK(mpincclCommInitMPI(&pair, two, NULL));
  char *buf = dev_alloc(rank == 0 ? SMALL : LARGE), *s = NULL;
  if (rank == 0) pattern_fill(buf, SMALL, seed_of(0, 1, 9300), stream);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  in_the_way_send(pair, two, buf, SMALL);
  if (rank == 1) expect_pattern(buf, SMALL, seed_of(0, 1, 9300), "in_the_way: first message");
  int way = 0, exercised = 0;
  uint64_t before = mpn_side_staged();
  if (rank == 0) {
    uintptr_t q = (uintptr_t)buf;
    EXPECT(cudaFree(buf) == cudaSuccess);
    s = dev_alloc(LARGE);
    pattern_fill(s, LARGE, seed_of(0, 1, 9301), stream);
    EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
    /* What rank 0's send will find in rank 1's list. */
    const mpn_rank_info_t* r1 = &pair->topo.ranks[1];
    mpn_ipc_held_proc_t peer = {.pidns = r1->pidns, .start_time = r1->start_time, .pid = r1->pid};
    mpn_ipc_desc_t d;
    int pool = 0;
    EXPECT_OK(mpn_ipc_export(s, "s", &d, &pool));
    way = mpn_ipc_held_in_way(&peer, mpn_chan_proc_id(), d.base, d.size);
    exercised = (uintptr_t)s < q + SMALL && q < (uintptr_t)s + LARGE;
  }
  in_the_way_send(pair, two, rank == 0 ? s : buf, LARGE);
  if (rank == 1) expect_pattern(buf, LARGE, seed_of(0, 1, 9301), "in_the_way: the new buffer");
  if (rank == 0) {
    EXPECT(mpn_side_staged() - before == (uint64_t)way);
    if (exercised && !way)
      fprintf(stderr,
              "in_the_way: s overlaps the freed q, but rank 1 does not map q (it moved the first message from its own "
              "side)\n");
    if (!exercised) fprintf(stderr, "in_the_way: the allocator placed s apart from q: the stage was not exercised\n");
    if (way) fprintf(stderr, "in_the_way: s went through a stage\n");
  }
  EXPECT_OK(ncclCommDestroy(pair));
  cudaFree(rank == 0 ? s : buf);
  MPI_Comm_free(&two);
}

/* Rank 0's stream of the application's, held by a host function until rank
 * 0's host is past its launch (or the rescuer, 10 s on, lets it go and says
 * so: the launch waited with the close, which waits for that stream). */
static int held_go, held_rescued;

static void CUDART_CB held_until_go(void* arg) {
  (void)arg;
  while (!__atomic_load_n(&held_go, __ATOMIC_ACQUIRE)) usleep(1000);
}

static void* rescuer(void* arg) {
  (void)arg;
  for (int i = 0; i < 10000 && !__atomic_load_n(&held_go, __ATOMIC_ACQUIRE); i++) usleep(1000);
  if (__atomic_exchange_n(&held_go, 1, __ATOMIC_ACQ_REL) == 0) __atomic_store_n(&held_rescued, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Rank 0 maps rank 1's part of a window with a put on communicator first. */
static void mapped_by_put(ncclComm_t first, ncclWindow_t win, void* wbuf, const char* src, size_t bytes) {
  if (rank == 0) EXPECT_OK(ncclPutSignal(src, bytes, ncclInt8, 1, win, 0, 0, 0, 0, first, stream));
  ncclWaitSignalDesc_t from0 = {.opCnt = 1, .peer = 0, .sigIdx = 0, .ctx = 0};
  if (rank == 1) EXPECT_OK(ncclWaitSignal(1, &from0, first, stream));
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  if (rank == 1) expect_pattern(wbuf, bytes, seed_of(0, 1, 9400), "beside_a_close: the put");
}

/*
 * A launch while a close of an IPC import waits for the application's work
 * (docs/P2P.md, known problem 17): rank 0's stream held waits for rank 0's
 * host to pass its next ncclGroupEnd; rank 0 then drops its import of a
 * deregistered window, whose close, once the library's work is done, waits
 * for held.  That ncclGroupEnd (rank 0's first with rank 1 on a new
 * communicator, with several copies on a new stream) waits for the close
 * 20 ms, goes on beside it, and must return.  Only with ranks 0 and 1 on
 * different GPUs: where the import maps memory of the launch's own GPU,
 * nearly every CUDA call of the process waits with the close (copies,
 * kernels, events, allocations: bench/ipc_close.cu section 3), and the
 * launch waits for it all the same.  Rank 1 posts its receives after rank
 * 0's launch.
 */
void beside_a_close(void) {
  if (nranks < 2 || harness_over_ucx()) return;
  if (mpn_topo_same_gpu(&comm->topo, 0, 1)) {
    if (rank == 0) fprintf(stderr, "beside_a_close: ranks 0 and 1 share a GPU: not run\n");
    return;
  }
  enum { WIN = 1 << 20, PUT = 4096, PART = 1 << 20, PARTS = 4 };
  MPI_Comm two;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
  if (rank > 1) return;
  ncclComm_t first = NULL, late = NULL;
  EXPECT_OK(mpincclCommInitMPI(&first, two, NULL));
  EXPECT_OK(mpincclCommInitMPI(&late, two, NULL));
  void* wbuf = NULL;
  ncclWindow_t win = NULL;
  EXPECT_OK(ncclMemAlloc(&wbuf, WIN));
  char *src = dev_alloc(PUT), *msg = dev_alloc((size_t)PARTS * PART);
  pattern_fill(src, PUT, seed_of(0, 1, 9400), stream);
  if (rank == 0) pattern_fill(msg, (size_t)PARTS * PART, seed_of(0, 1, 9401), stream);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT_OK(ncclCommWindowRegister(first, wbuf, WIN, &win, NCCL_WIN_DEFAULT));
  mapped_by_put(first, win, wbuf, src, PUT);
  cudaStream_t held = NULL, fresh = NULL;
  EXPECT(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking) == cudaSuccess);
  EXPECT(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking) == cudaSuccess);
  pthread_t rescue;
  int exercised = 0, rescuing = 0;
  __atomic_store_n(&held_go, rank != 0, __ATOMIC_RELEASE);
  __atomic_store_n(&held_rescued, 0, __ATOMIC_RELEASE);
  if (rank == 0) {
    rescuing = pthread_create(&rescue, NULL, rescuer, NULL) == 0;
    EXPECT(rescuing);
    EXPECT(cudaLaunchHostFunc(held, held_until_go, NULL) == cudaSuccess);
  }
  EXPECT_OK(ncclCommWindowDeregister(first, win)); /* rank 0's import goes to the closing thread */
  if (rank == 0) {
    usleep(300000); /* the closing thread looks every 20 ms */
    exercised = mpn_ipc_closer_pending() > 0;
    EXPECT_OK(ncclGroupStart());
    for (int k = 0; k < PARTS; k++) EXPECT_OK(ncclSend(msg + (size_t)k * PART, PART, ncclInt8, 1, late, fresh));
    EXPECT_OK(ncclGroupEnd());
    __atomic_store_n(&held_go, 1, __ATOMIC_RELEASE);
    if (rescuing) pthread_join(rescue, NULL);
    EXPECT(__atomic_load_n(&held_rescued, __ATOMIC_ACQUIRE) == 0); /* the launch returned by itself */
  }
  MPI_Barrier(two);
  if (rank == 1) {
    EXPECT_OK(ncclGroupStart());
    for (int k = 0; k < PARTS; k++) EXPECT_OK(ncclRecv(msg + (size_t)k * PART, PART, ncclInt8, 0, late, fresh));
    EXPECT_OK(ncclGroupEnd());
  }
  EXPECT(cudaStreamSynchronize(fresh) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(held) == cudaSuccess);
  if (rank == 1) expect_pattern(msg, (size_t)PARTS * PART, seed_of(0, 1, 9401), "beside_a_close: the message");
  if (rank == 0 && !exercised) fprintf(stderr, "beside_a_close: no close was pending at the launch: not exercised\n");
  if (rank == 0 && exercised) fprintf(stderr, "beside_a_close: the launch went on beside a close\n");
  MPI_Barrier(two);
  cudaStreamDestroy(held);
  cudaStreamDestroy(fresh);
  EXPECT_OK(ncclCommDestroy(late));
  EXPECT_OK(ncclCommDestroy(first));
  EXPECT_OK(ncclMemFree(wbuf));
  cudaFree(src);
  cudaFree(msg);
  MPI_Comm_free(&two);
}
