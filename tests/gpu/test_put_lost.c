/*
 * test_put_lost.c - run by launch_put_lost.sh on two ranks with the UCX path
 * forced and chunks of 64 KiB.  The test wraps the proxy's ucp_put_nbx
 * (-Wl,--wrap) so that one chosen data put of rank 0 fails as it starts,
 * the endpoint staying good.  Two cases, each on a communicator of its own:
 * a put of 4 chunks whose first chunk fails, and a put of one chunk whose
 * data fails.  Either way rank 1's ncclWaitSignal must end, and both ranks
 * must see ncclRemoteError, rank 1's message saying that the data is not in
 * the window, rank 0's that its own put failed: no stale data taken
 * silently, no wait that hangs.  Rank 0
 * prints one line ending in "ok" or "FAIL".
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <ucp/api/ucp.h>

#include "fault_gpu.h"

ucs_status_ptr_t __real_ucp_put_nbx(ucp_ep_h ep, const void* buffer, size_t count, uint64_t remote_addr,
                                    ucp_rkey_h rkey, const ucp_request_param_t* param);

/* Set to 1: the next put of data (more than a descriptor's 32 bytes) fails. */
static int fail_next;

ucs_status_ptr_t __wrap_ucp_put_nbx(ucp_ep_h ep, const void* buffer, size_t count, uint64_t remote_addr,
                                    ucp_rkey_h rkey, const ucp_request_param_t* param) {
  if (count > 64 && __atomic_exchange_n(&fail_next, 0, __ATOMIC_ACQ_REL)) return UCS_STATUS_PTR(UCS_ERR_IO_ERROR);
  return __real_ucp_put_nbx(ep, buffer, count, remote_addr, rkey, param);
}

/* One put of bytes from rank 0 into rank 1's window, waited for there. */
static int put_once(ncclComm_t comm, ncclWindow_t win, const char* src, size_t bytes, const fault_gpu_t* f) {
  ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = 0, .sigIdx = 0, .ctx = 0};
  return f->rank == 0 ? ncclPutSignal(src, bytes, ncclInt8, 1, win, 0, 0, 0, 0, comm, f->stream) == ncclSuccess
                      : ncclWaitSignal(1, &d, comm, f->stream) == ncclSuccess;
}

/* Whether all of the window's first bytes hold value (rank 1). */
static int window_holds(const char* wbuf, size_t bytes, unsigned char value) {
  static unsigned char host[1 << 18];
  if (bytes > sizeof(host) || cudaMemcpy(host, wbuf, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 0;
  for (size_t i = 0; i < bytes; i++)
    if (host[i] != value) return 0;
  return 1;
}

/* A good put (its data checked), then one whose first data put fails. */
static int one_case(const char* name, size_t bytes, char* src, const fault_gpu_t* f) {
  ncclComm_t comm = NULL;
  ncclWindow_t win = NULL;
  void* wbuf = NULL;
  if (mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess || ncclMemAlloc(&wbuf, bytes) != ncclSuccess ||
      cudaMemset(wbuf, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess ||
      ncclCommWindowRegister(comm, wbuf, bytes, &win, NCCL_WIN_DEFAULT) != ncclSuccess) {
    fprintf(stderr, "rank %d: %s: set-up failed: %s\n", f->rank, name, ncclGetLastError(comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int ok = cudaMemset(src, 0x11, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
           put_once(comm, win, src, bytes, f) && cudaStreamSynchronize(f->stream) == cudaSuccess &&
           (f->rank == 0 || window_holds(wbuf, bytes, 0x11));
  if (!ok) fprintf(stderr, "rank %d: %s: the good put failed: %s\n", f->rank, name, ncclGetLastError(comm));
  MPI_Barrier(MPI_COMM_WORLD);
  ok &= cudaMemset(src, 0x22, bytes) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess;
  if (f->rank == 0) __atomic_store_n(&fail_next, 1, __ATOMIC_RELEASE);
  ok &= put_once(comm, win, src, bytes, f);
  cudaError_t drained = fault_stream_drain(f->stream, 15);
  double seen = 0;
  ncclResult_t async = fault_wait_async(comm, 15, &seen);
  const char* text = ncclGetLastError(comm);
  /* Rank 0's own UCX put failed: its report says so, not that the peer went. */
  int told = strstr(text, f->rank == 0 ? "put with signal with rank 1 failed: Input/output error (on this rank's side)"
                                       : "its data is not in the window") != NULL;
  printf("test_put_lost: rank %d: %s: wait %s, async %s after %.2f s: %s\n", f->rank, name,
         drained == cudaSuccess ? "ended" : cudaGetErrorString(drained), ncclGetErrorString(async), seen, text);
  ok &= drained == cudaSuccess && async == ncclRemoteError && told && fail_next == 0;
  MPI_Barrier(MPI_COMM_WORLD); /* (an abort tells the peer: only once both looked) */
  ncclCommAbort(comm);
  ncclMemFree(wbuf);
  return ok;
}

int main(int argc, char** argv) {
  fault_gpu_t f;
  int rc = fault_gpu_start("test_put_lost", &argc, &argv, &f);
  if (rc != 0) return rc;
  char* src = NULL;
  if (cudaMalloc((void**)&src, 1 << 18) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  int ok = one_case("first of 4 chunks", 1 << 18, src, &f);
  ok &= one_case("one chunk", 1 << 15, src, &f);
  int all = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (f.rank == 0) printf("test_put_lost: 2 ranks: %s\n", all ? "ok" : "FAIL");
  ncclCommDestroy(f.comm);
  cudaFree(src);
  MPI_Finalize();
  return all ? 0 : 1;
}
