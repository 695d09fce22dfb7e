/*
 * test_ucx_senders.c - a size mismatch with several senders over UCX (host
 * memory, UCX forced), 3 and 4 ranks: rank 0 posts a receive of 16 bytes
 * from every other rank, and each sends 8.  Every sender must hear of it
 * (ncclInvalidUsage and rank 0's report naming it), not the first one
 * only, whose notice alone went out until the fifty-third session; rank 0
 * reports the first it found.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "mpi_test.h"
#include "mpinccl.h"
#include "ucx/net.h"

static int rank, nranks;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "rank", rank, "")

/* Waits (10 s at most) until comm reports an asynchronous error; returns it. */
static ncclResult_t async_of(ncclComm_t comm) {
  time_t end = time(NULL) + 10;
  ncclResult_t async = ncclSuccess;
  while (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess && time(NULL) <= end) usleep(1000);
  return async;
}

/* Rank 0: a receive of 16 bytes from every rank; the others: a send of 8. */
static void every_sender_told(ncclComm_t comm) {
  enum { EXPECTED = 16, SENT = 8 };
  int n = rank == 0 ? nranks - 1 : 1;
  uint64_t* flags = calloc((size_t)n, sizeof(uint64_t));
  int* errors = calloc((size_t)n, sizeof(int));
  char(*bufs)[EXPECTED] = calloc((size_t)n, EXPECTED);
  for (int i = 0; i < n; i++) {
    ncclResult_t posted = rank == 0 ? mpn_ucx_host_recv(comm, i + 1, bufs[i], EXPECTED, &flags[i], 1, &errors[i])
                                    : mpn_ucx_host_send(comm, 0, bufs[i], SENT, &flags[i], 1, &errors[i]);
    EXPECT(posted == ncclSuccess);
  }
  mpn_error_clear();
  ncclResult_t async = async_of(comm);
  if (async != ncclInvalidUsage) fprintf(stderr, "[rank %d] async error: %s\n", rank, ncclGetErrorString(async));
  EXPECT(async == ncclInvalidUsage);
  char text[256];
  if (rank == 0) /* the first found: any sender */
    snprintf(text, sizeof(text), "to rank 0 over UCX does not fit its receive: the ncclSend and ncclRecv differ");
  else
    snprintf(text, sizeof(text), "a message from rank %d to rank 0 over UCX does not fit its receive (rank 0's report)",
             rank);
  EXPECT(strstr(ncclGetLastError(comm), text) != NULL);
  EXPECT(strstr(ncclGetLastError(comm), "(16 bytes expected, 8 came)") != NULL);
  time_t end = time(NULL) + 10; /* every operation ends: a receive fails, a send is released or done */
  for (int i = 0; i < n; i++)
    while (__atomic_load_n(&flags[i], __ATOMIC_ACQUIRE) != 1 && time(NULL) <= end) usleep(1000);
  for (int i = 0; i < n; i++) EXPECT(flags[i] == 1);
  if (rank == 0)
    for (int i = 0; i < n; i++) EXPECT(errors[i] == ncclInvalidUsage);
  MPI_Barrier(MPI_COMM_WORLD); /* nobody closes endpoints others still use */
  free(flags);
  free(errors);
  free(bufs);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("3 4");
    return 0;
  }
  setenv("MPINCCL_TRANSPORT", "ucx", 1);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm) {
    every_sender_told(comm);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess);
  }
  return mpi_test_finish(rank, "test_ucx_senders: %d ranks, ", nranks);
}
