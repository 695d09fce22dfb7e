/*
 * test_hosts_fault.c - run by test_hosts.sh with one rank on each of two test
 * hosts: rank 1 is killed while it sends 64 MiB of host memory to rank 0
 * over UCX.  Rank 0 must see ncclRemoteError from ncclCommGetAsyncError
 * within the network timeout (MPINCCL_NET_TIMEOUT, set to 3 s by the
 * script), its pending receive must be released, and ncclCommAbort must
 * return promptly.  On a second communicator rank 0 holds only what
 * capturing a wait for rank 1's signals in a CUDA graph leaves (nothing
 * posted, nothing waited for outside a graph): a replay may wait for
 * rank 1, so its death must be reported there too, within the same time
 * (it was not: the replay waited for good).  Rank 0 then leaves without
 * MPI_Finalize (its peer is gone; the job runs with --enable-recovery).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "../fault.h"
#include "mpinccl.h"
#include "rma/rma.h"
#include "ucx/net.h"

/* Connects both ways first, so that the peer dies in the middle of a
 * transfer, not while UCX is still wiring the endpoints up (UCX 1.13
 * can abort in wire-up when the other side vanishes: an assertion on a
 * late REP message).  0 when both messages came. */
static int warm_up(ncclComm_t comm, int rank) {
  char small[2][8] = {{0}};
  uint64_t warm[2] = {0, 0};
  int werr[2] = {0, 0};
  for (int k = 0; k < 2; k++) { /* rank 1 to rank 0, then rank 0 to rank 1 */
    if (rank == 1 - k) mpn_ucx_host_send(comm, k, small[k], 8, &warm[k], 1, &werr[k]);
    else mpn_ucx_host_recv(comm, 1 - k, small[k], 8, &warm[k], 1, &werr[k]);
    double t = fault_now();
    while (__atomic_load_n(&warm[k], __ATOMIC_ACQUIRE) != 1 && fault_now() - t < 20) usleep(100);
    if (warm[k] != 1 || werr[k] != 0) {
      fprintf(stderr, "rank %d: the warm-up message %d did not arrive\n", rank, k);
      return -1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ncclComm_t comm = NULL, captured = NULL;
  if (mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess ||
      mpincclCommInitMPI(&captured, MPI_COMM_WORLD, NULL) != ncclSuccess) {
    fprintf(stderr, "rank %d: creation failed: %s\n", rank, ncclGetLastError(NULL));
    return 1;
  }
  if (warm_up(comm, rank) != 0 || warm_up(captured, rank) != 0) return 1;
  mpn_rma_t* rma = NULL; /* a wait for rank 1's signal captured on rank 0 */
  if (rank == 0 && (mpn_rma_state(captured, &rma) != ncclSuccess || rma == NULL)) {
    fprintf(stderr, "rank 0: no one-sided state: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  if (rank == 0) rma->graph_expected[mpn_rma_pc(captured, 1, 0)]++;
  size_t bytes = (size_t)64 << 20;
  char* buf = calloc(bytes, 1);
  uint64_t flag = 0;
  int error = 0;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    mpn_ucx_host_send(comm, 0, buf, bytes, &flag, 1, &error);
    usleep(2000); /* the transfer is under way */
    raise(SIGKILL);
  }
  mpn_ucx_host_recv(comm, 1, buf, bytes, &flag, 1, &error);
  double seen = 0;
  ncclResult_t async = fault_wait_async(comm, 30, &seen);
  int released = __atomic_load_n(&flag, __ATOMIC_ACQUIRE) == 1;
  double seen_captured = 0;
  ncclResult_t async_captured = fault_wait_async(captured, 30, &seen_captured);
  double t0 = fault_now();
  ncclResult_t aborted = ncclCommAbort(comm);
  double abort_s = fault_now() - t0;
  int ok = async == ncclRemoteError && released && error == ncclRemoteError && aborted == ncclSuccess && abort_s < 5 &&
           async_captured == ncclRemoteError && ncclCommAbort(captured) == ncclSuccess;
  printf(
      "test_hosts_fault: rank 0 saw %s after %.1f s (%s), receive %s, abort took %.2f s; behind the "
      "captured wait %s after %.1f s more: %s\n",
      ncclGetErrorString(async), seen, ncclGetLastError(NULL), released ? "released" : "still pending", abort_s,
      ncclGetErrorString(async_captured), seen_captured, ok ? "ok" : "FAIL");
  fflush(stdout);
  _exit(ok ? 0 : 1);
}
