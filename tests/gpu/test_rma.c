/*
 * test_rma.c - windows and one-sided operations between ranks sharing a GPU
 * (run under mpirun with 1 to 8 processes) and between ranks of one process:
 * main, which runs every step in order, the windows the steps share, and
 * the steps for registration and its refusals (ncclMemAlloc, windows at an
 * offset, every refusal, agreement between ranks, ncclMemFree of a
 * window's memory before its deregistration).  Puts and signals in
 * patterns are in test_rma_patterns.c, CUDA graphs in test_rma_graphs.c,
 * ranks of one process in test_rma_one_process.c.  Every byte put is
 * checked.  Exits 77 without a GPU.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/channel.h" /* (the library's own headers before the harness's globals) */
#include "cuda/ipc.h"
#include "rma/window.h"
#include "rma/winshare.h"
#include "transport.h"

#include "harness.h"
#include "mpinccl.h"
#include "pattern.h"
#include "test_rma.h"

void* dev_alloc(size_t bytes) {
  void* p = NULL;
  if (ncclMemAlloc(&p, bytes) != ncclSuccess) {
    fprintf(stderr, "[rank %d] ncclMemAlloc(%zu) failed\n", rank, bytes);
    exit(1);
  }
  return p;
}

/* A window of bytes from ncclMemAlloc, cleared before any peer can put into
 * it: cudaMemset would queue the clear on the legacy stream, which the
 * test's non-blocking stream does not wait for, and under load it ran after
 * a peer's first put and wiped it (test_rma failed under make check). */
ncclWindow_t window(size_t bytes, void** buf) {
  *buf = dev_alloc(bytes);
  EXPECT(cudaMemsetAsync(*buf, 0, bytes, stream) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  ncclWindow_t w = NULL;
  EXPECT_OK(ncclCommWindowRegister(comm, *buf, bytes, &w, NCCL_WIN_DEFAULT));
  EXPECT(w != NULL);
  return w;
}

void window_free(ncclWindow_t w, void* buf) {
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT_OK(ncclCommWindowDeregister(comm, w));
  EXPECT_OK(ncclMemFree(buf));
}

static void mem_alloc(void) {
  void* p = NULL;
  EXPECT_OK(ncclMemAlloc(&p, 1000));
  EXPECT(p != NULL && (uintptr_t)p % 4096 == 0);
  EXPECT_OK(ncclMemFree(p));
  int on_stack;
  EXPECT_ERR(ncclMemFree(&on_stack), ncclInvalidArgument, "ncclMemFree");
}

/* ncclMemAlloc and cudaMalloc windows, at an offset, both flags; refusals. */
static void windows(void) {
  void *a, *raw = NULL, *user = NULL;
  ncclWindow_t wa = window(1 << 20, &a);
  EXPECT_OK(ncclWinGetUserPtr(comm, wa, &user));
  EXPECT(user == a);
  EXPECT(cudaMalloc(&raw, 3 << 20) == cudaSuccess);
  char* inside = (char*)(((uintptr_t)raw + 8192 + 4095) & ~(uintptr_t)4095);
  ncclWindow_t wb = NULL;
  EXPECT_OK(ncclCommWindowRegister(comm, inside, 1 << 20, &wb, NCCL_WIN_COLL_SYMMETRIC));
  EXPECT(wb != NULL);
  ncclWindow_t bad = NULL;
  EXPECT_ERR(ncclCommWindowRegister(comm, inside + 1, 4096, &bad, 0), ncclInvalidArgument,
             "NCCL_WIN_REQUIRED_ALIGNMENT");
  EXPECT(bad == NULL);
  if (nranks > 1) { /* symmetric windows of different sizes: refused on every rank */
    EXPECT_ERR(ncclCommWindowRegister(comm, inside, 4096 * (size_t)(rank + 1), &bad,
                                      NCCL_WIN_COLL_SYMMETRIC),
               ncclInvalidArgument, "NCCL_WIN_COLL_SYMMETRIC");
    EXPECT(bad == NULL);
  }
  EXPECT_ERR(ncclCommWindowRegister(comm, inside, 3 << 20, &bad, 0), ncclInvalidArgument,
             "runs past the end of its allocation");
  EXPECT(bad == NULL);
  /* Data through the window at an offset: put to self at the end. */
  char* src = dev_alloc(4096);
  pattern_fill(src, 4096, seed_of(rank, rank, 1), stream);
  EXPECT_OK(ncclPutSignal(src, 4096, ncclInt8, rank, wb, (1 << 20) - 4096, 0, 0, 0, comm, stream));
  ncclWaitSignalDesc_t d = {1, rank, 0, 0};
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  expect_pattern(inside + (1 << 20) - 4096, 4096, seed_of(rank, rank, 1), "window at an offset");
  window_free(wa, a);
  EXPECT_OK(ncclCommWindowDeregister(comm, wb));
  EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, rank, wb, 0, 0, 0, 0, comm, stream),
             ncclInvalidArgument, "is not a window of comm");
  EXPECT_ERR(ncclWinGetUserPtr(comm, wb, &user), ncclInvalidArgument, "is not a window of comm");
  cudaFree(raw);
  ncclMemFree(src);
}

/* Every refusal names its argument. */
static void refusals(void) {
  void* buf;
  ncclWindow_t w = window(1 << 16, &buf);
  char* src = dev_alloc(1 << 16);
  int peer = (rank + 1) % nranks;
  EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, peer, w, 0, 1, 0, 0, comm, stream), ncclInvalidArgument, "sigIdx 1");
  EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, peer, w, 0, 0, 0, 4, comm, stream), ncclInvalidArgument, "flags 0x4");
  EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, peer, NULL, 0, 0, 0, 0, comm, stream), ncclInvalidArgument, "peerWin is NULL");
  EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, nranks, w, 0, 0, 0, 0, comm, stream), ncclInvalidArgument, "peer");
  EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, peer, w, 0, 0, 1, 0, comm, stream), ncclInvalidArgument, "ctx 1");
  EXPECT_ERR(ncclPutSignal(src, 16, ncclInt8, peer, w, (1 << 16) - 8, 0, 0, 0, comm, stream),
             ncclInvalidArgument, "runs past the end");
  char* small = NULL; /* a source shorter than the put: the copy would read past it */
  EXPECT(cudaMalloc((void**)&small, 4096) == cudaSuccess);
  EXPECT_ERR(ncclPutSignal(small, 8192, ncclInt8, peer, w, 0, 0, 0, 0, comm, stream), ncclInvalidArgument, "localbuff");
  EXPECT(strstr(ncclGetLastError(comm), "runs past the end of its allocation") != NULL);
  cudaFree(small);
  EXPECT_ERR(ncclSignal(peer, 2, 0, 0, comm, stream), ncclInvalidArgument, "sigIdx 2");
  ncclWaitSignalDesc_t d = {1, peer, 0, 0};
  EXPECT_ERR(ncclWaitSignal(0, &d, comm, stream), ncclInvalidArgument, "nDesc 0");
  EXPECT_ERR(ncclWaitSignal(1, NULL, comm, stream), ncclInvalidArgument, "signalDescs is NULL");
  d.opCnt = 0;
  EXPECT_ERR(ncclWaitSignal(1, &d, comm, stream), ncclInvalidArgument, "opCnt 0");
  if (harness_over_ucx() && peer != rank) { /* more than a UCX peer's ring of signals keeps, in one call */
    ncclWaitSignalDesc_t two[2] = {{200, peer, 0, 0}, {57, peer, 0, 0}};
    EXPECT_ERR(ncclWaitSignal(2, two, comm, stream), ncclInvalidArgument, "at most 256 may be outstanding");
    EXPECT(strstr(ncclGetLastError(comm), "signalDescs[0].opCnt 200: 257 signals of rank") != NULL);
  }
  /* A window of another communicator. */
  ncclComm_t other;
  EXPECT_OK(mpincclCommInitMPI(&other, MPI_COMM_WORLD, NULL));
  ncclWindow_t wo = NULL;
  EXPECT_OK(ncclCommWindowRegister(other, buf, 1 << 16, &wo, 0));
  EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, peer, wo, 0, 0, 0, 0, comm, stream), ncclInvalidArgument,
             "is not a window of comm");
  EXPECT_OK(ncclCommWindowDeregister(other, wo));
  EXPECT_OK(ncclCommDestroy(other));
  window_free(w, buf);
  ncclMemFree(src);
}

/* A put of a pattern to the next rank through w and the wait for the one
 * from the previous rank, checked in buf. */
static void ring_put(ncclWindow_t w, void* buf, char* src, size_t bytes, int k, const char* what) {
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  pattern_fill(src, bytes, seed_of(rank, to, k), stream);
  EXPECT_OK(ncclPutSignal(src, bytes, ncclInt8, to, w, 0, 0, 0, 0, comm, stream));
  ncclWaitSignalDesc_t d = {1, from, 0, 0};
  EXPECT_OK(ncclWaitSignal(1, &d, comm, stream));
  expect_pattern(buf, bytes, seed_of(from, rank, k), what);
  MPI_Barrier(MPI_COMM_WORLD); /* the next put into buf comes after this check */
}

/*
 * Registration and deregistration agree on every rank (desk review of the
 * twenty-fourth session): one rank's bad argument fails the call on all
 * of them instead of leaving them waiting, after which the communicator's
 * collectives are still in step; winFlags must match; a size that wraps
 * is refused; a bad handle on one rank, or ranks naming different
 * windows, leave the windows registered on all; a deregistered handle stays
 * refused after new registrations.
 */
static void window_agreement(void) {
  enum { BYTES = 1 << 16 };
  void* buf;
  char* src = dev_alloc(BYTES);
  ncclWindow_t w = NULL, stale;
  char* spare = dev_alloc(BYTES);
  if (nranks > 1) {
    EXPECT_ERR(ncclCommWindowRegister(comm, rank == 0 ? NULL : spare, BYTES, &w, 0), ncclInvalidArgument,
               rank == 0 ? "buff is NULL" : "rank 0 could not register");
    EXPECT(w == NULL);
    EXPECT_ERR(ncclCommWindowRegister(comm, spare, BYTES, &w, rank == 0 ? NCCL_WIN_COLL_SYMMETRIC : 0),
               ncclInvalidArgument, "winFlags must be the same");
    EXPECT(w == NULL);
  }
  EXPECT_ERR(ncclCommWindowRegister(comm, spare, SIZE_MAX - 4095, &w, 0), ncclInvalidArgument,
             "runs past the end of its allocation");
  EXPECT(w == NULL);
  w = window(BYTES, &buf);
  ring_put(w, buf, src, BYTES, 70, "window_agreement: after refusals");
  if (nranks > 1) {
    ncclWindow_t bogus = (ncclWindow_t)(uintptr_t)0x1000;
    EXPECT_ERR(ncclCommWindowDeregister(comm, rank == 0 ? bogus : w), ncclInvalidArgument,
               rank == 0 ? "is not a window of comm" : "rank 0 refused it");
    ring_put(w, buf, src, BYTES, 71, "window_agreement: after a refused deregistration");
    /* Two valid handles, of different windows: refused on every rank, both stay. */
    void* buf2;
    ncclWindow_t w2 = window(BYTES, &buf2);
    EXPECT_ERR(ncclCommWindowDeregister(comm, rank == 0 ? w2 : w), ncclInvalidUsage,
               "every rank must pass the same window");
    ring_put(w, buf, src, BYTES, 72, "window_agreement: after deregistrations of different windows");
    ring_put(w2, buf2, src, BYTES, 73, "window_agreement: the other window after them");
    window_free(w2, buf2);
  }
  stale = w;
  window_free(w, buf);
  for (int k = 0; k < 16; k++) { /* new windows never take the stale handle's place */
    ncclWindow_t again = window(BYTES, &buf);
    EXPECT(again != stale);
    EXPECT_ERR(ncclPutSignal(src, 8, ncclInt8, rank, stale, 0, 0, 0, 0, comm, stream), ncclInvalidArgument,
               "is not a window of comm");
    window_free(again, buf);
  }
  ncclMemFree(src);
  ncclMemFree(spare);
}

/*
 * Two windows at offsets of one allocation share this process's import of
 * the next rank's allocation: deregistering one keeps the import for the
 * other (it was closed, and the other's next put mapped it again, 80-270
 * us), and deregistering the last lets it go.  Data checked throughout.
 */
static void windows_share_allocation(void) {
  enum { BYTES = 1 << 16 };
  char* all = dev_alloc(2 * BYTES);
  char* src = dev_alloc(BYTES);
  EXPECT(cudaMemsetAsync(all, 0, 2 * BYTES, stream) == cudaSuccess);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  ncclWindow_t wa = NULL, wb = NULL;
  EXPECT_OK(ncclCommWindowRegister(comm, all, BYTES, &wa, 0));
  EXPECT_OK(ncclCommWindowRegister(comm, all + BYTES, BYTES, &wb, 0));
  ring_put(wa, all, src, BYTES, 90, "windows_share_allocation: the first window");
  ring_put(wb, all + BYTES, src, BYTES, 91, "windows_share_allocation: the second window");
  int to = (rank + 1) % nranks, dev = -1;
  EXPECT_OK(ncclCommCuDevice(comm, &dev));
  const mpn_win_part_t* part = &wa->parts[to];
  /* Only a peer in another process over CUDA IPC is mapped. */
  int mapped = part->proc != mpn_chan_proc_id() && comm->transport[to] == MPN_TRANSPORT_IPC;
  if (mapped) {
    EXPECT(wb->parts[to].ipc.buffer_id == part->ipc.buffer_id); /* one allocation, one import */
    EXPECT(mpn_win_share_count(part->proc, part->ipc.buffer_id, dev) == 2);
    EXPECT(mpn_ipc_import_live(part->proc, part->ipc.buffer_id, dev));
  }
  uint64_t owner = part->proc, id = part->ipc.buffer_id;
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT_OK(ncclCommWindowDeregister(comm, wa));
  if (mapped) {
    EXPECT(mpn_win_share_count(owner, id, dev) == 1);
    EXPECT(mpn_ipc_import_live(owner, id, dev)); /* kept for wb */
  }
  ring_put(wb, all + BYTES, src, BYTES, 92, "windows_share_allocation: the second window after the first went");
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT_OK(ncclCommWindowDeregister(comm, wb));
  if (mapped) {
    EXPECT(mpn_win_share_count(owner, id, dev) == 0);
    EXPECT(!mpn_ipc_import_live(owner, id, dev));
  }
  EXPECT_OK(ncclMemFree(all));
  EXPECT_OK(ncclMemFree(src));
}

/*
 * ncclMemFree of memory that backs a live window is deferred to the
 * window's deregistration: the allocation made next gets other memory
 * (freed at once, CUDA handed its address out again and the peers' puts
 * into the window landed in the new buffer, or were lost), the window still
 * takes puts, a second ncclMemFree and a new window over it are refused,
 * and after the deregistration the pointer is unknown.
 */
static void free_before_deregister(void) {
  enum { BYTES = 1 << 20, PUT = 65536 };
  void *b, *user = NULL;
  ncclWindow_t w = window(BYTES, &b), again = NULL;
  char* src = dev_alloc(PUT);
  char name[32];
  snprintf(name, sizeof(name), "%p", b);
  EXPECT_OK(ncclMemFree(b));
  EXPECT_ERR(ncclMemFree(b), ncclInvalidArgument, "was freed already");
  EXPECT(strstr(ncclGetLastError(NULL), name) != NULL);
  char* n = dev_alloc(BYTES);
  EXPECT(n + BYTES <= (char*)b || (char*)b + BYTES <= n);
  pattern_fill(n, BYTES, seed_of(rank, rank, 80), stream);
  EXPECT_OK(ncclWinGetUserPtr(comm, w, &user));
  EXPECT(user == b);
  ring_put(w, user, src, PUT, 81, "free_before_deregister: a put into freed window memory");
  expect_pattern(n, BYTES, seed_of(rank, rank, 80), "free_before_deregister: the allocation made after the free");
  /* Every rank passes freed memory, at its start and inside it: all refuse. */
  EXPECT_ERR(ncclCommWindowRegister(comm, b, BYTES, &again, 0), ncclInvalidArgument, name);
  EXPECT(strstr(ncclGetLastError(comm), "ncclMemFree") != NULL);
  EXPECT_ERR(ncclCommWindowRegister(comm, (char*)b + PUT, PUT, &again, 0), ncclInvalidArgument, name);
  EXPECT(again == NULL);
  ring_put(w, user, src, PUT, 82, "free_before_deregister: a put after the refused registrations");
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT_OK(ncclCommWindowDeregister(comm, w)); /* b's memory goes here */
  EXPECT_ERR(ncclMemFree(b), ncclInvalidArgument, "was not allocated by ncclMemAlloc");
  EXPECT_OK(ncclMemFree(n));
  EXPECT_OK(ncclMemFree(src));
}

int main(int argc, char** argv) {
  int started = harness_start(argc, argv, "test_rma", "1 2 3 4 8", "TEST_RMA", 1);
  if (started >= 0) return started;
  STEP(mem_alloc());
  STEP(windows());
  STEP(refusals());
  STEP(window_agreement());
  STEP(windows_share_allocation());
  STEP(pingpong(8));
  STEP(pingpong((1 << 20) + 3));
  STEP(host_source());
  STEP(barrier());
  STEP(alltoall(4096, 1));
  STEP(alltoall((1 << 20) + 16, 1));
  STEP(alltoall(4096 + 8, 3));
  STEP(many_then_signal());
  STEP(early_signals());
  STEP(signal_streams());
  STEP(self_lag());
  STEP(self_order());
  STEP(self_early_wait());
  STEP(self_after_other());
  STEP(mixed_group());
  STEP(graph_replay());
  STEP(graph_limits());
  STEP(graph_recapture());
  STEP(graph_recapture_many());
  STEP(graph_slot_wait());
  STEP(graph_destroy_early());
  STEP(threads_ring());
  STEP(windows_in_group());
  STEP(windows_nonblocking());
  STEP(free_before_deregister());
  STEP(init_all_devices());
  STEP(threads_streams());
  return harness_finish();
}
