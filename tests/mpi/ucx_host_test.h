/*
 * ucx_host_test.h - what test_ucx_host and test_ucx_failures share: the
 * start (UCX forced between processes, 2-4 ranks), the check of a size
 * mismatch both sides report, byte patterns and deadline-bound waits.
 */
#ifndef MPN_TESTS_MPI_UCX_HOST_TEST_H_
#define MPN_TESTS_MPI_UCX_HOST_TEST_H_

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "mpi_test.h"
#include "nccl.h"

static int rank, nranks;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "rank", rank, "")

/**
 * Answers --np-list (returns 0: main returns 0 at once, before MPI_Init),
 * else starts MPI with every other-process peer on UCX (returns 1).
 */
static inline int ucx_host_test_start(int* argc, char*** argv) {
  if (*argc > 1 && strcmp((*argv)[1], "--np-list") == 0) {
    puts("2 3 4");
    return 0;
  }
  MPI_Init(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  setenv("MPINCCL_TRANSPORT", "ucx", 1);
  return 1;
}

/** Has rank 0 name a step it finished, so that the test's log shows which steps ran. */
static inline void ucx_host_test_step(const char* name) {
  if (rank != 0) return;
  printf("step %s: done\n", name);
  fflush(stdout);
}

/** The byte i of message k from src to dst. */
static inline unsigned char byte_of(int src, int dst, size_t i, int k) {
  return (unsigned char)(src * 131 + dst * 17 + k * 7 + i * 2654435761u % 251);
}

/** Waits until every flag equals its value; 0 on time, -1 after 30 s. */
static inline int wait_flags(uint64_t* flags, int n, uint64_t value) {
  time_t end = time(NULL) + 30;
  for (;;) {
    int done = 0;
    for (int i = 0; i < n; i++) done += __atomic_load_n(&flags[i], __ATOMIC_ACQUIRE) == value;
    if (done == n) return 0;
    if (time(NULL) > end) return -1;
  }
}

/** Waits (30 s at most) until comm reports an asynchronous error; returns it. */
static inline ncclResult_t wait_async(ncclComm_t comm) {
  time_t end = time(NULL) + 30;
  ncclResult_t async = ncclSuccess;
  while (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess && time(NULL) <= end) usleep(1000);
  return async;
}

/**
 * A message from rank 0 to rank 1 did not fit its receive: both report
 * ncclInvalidUsage, rank 0 with rank 1's report (came: "8 came", "more came").
 * The thread's text of an earlier step must not pass for comm's.
 */
static inline void expect_mismatch(ncclComm_t comm, size_t expected, const char* came) {
  if (rank > 1) return;
  mpn_error_clear();
  ncclResult_t async = wait_async(comm);
  if (async != ncclInvalidUsage) fprintf(stderr, "[rank %d] async error: %s\n", rank, ncclGetErrorString(async));
  EXPECT(async == ncclInvalidUsage);
  char text[320];
  snprintf(text, sizeof(text),
           "a message from rank 0 to rank 1 over UCX does not fit its receive%s: the ncclSend and ncclRecv "
           "differ in count or datatype (%zu bytes expected, %s)",
           rank == 0 ? " (rank 1's report)" : "", expected, came);
  EXPECT(strstr(ncclGetLastError(comm), text) != NULL);
}

#endif /* MPN_TESTS_MPI_UCX_HOST_TEST_H_ */
