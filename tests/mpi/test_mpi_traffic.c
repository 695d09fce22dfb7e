/*
 * test_mpi_traffic.c - the program's own MPI traffic on a communicator it
 * gave to mpincclCommInitMPI stays its own (MPI_THREAD_MULTIPLE, where the
 * library's set-up and splits run on threads of their own, in no order with
 * the program's collectives): non-blocking splits of a communicator made
 * from MPI_COMM_WORLD (blocking, and non-blocking once it is made), each
 * followed by the program's MPI_Allgather on MPI_COMM_WORLD, one rank late
 * into it so that the library's collective comes first on that rank.  The
 * program's data must arrive as sent, and mpincclCommGetMPIComm must give
 * back the program's communicator.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mpi_test.h"
#include "mpinccl.h"

static int world_rank, world_size;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "world", world_rank, "last error: ")
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

enum { ROUNDS = 3, LATE_US = 200000 };

/* The program's allgather on MPI_COMM_WORLD; rank `late` comes to it late. */
static void program_allgather(int round, int late) {
  if (world_rank == late) usleep(LATE_US);
  int mine[2] = {1000 * round + world_rank, -(1000 * round + world_rank)}, all[2 * 64];
  memset(all, 0, sizeof(all));
  MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < world_size; r++) {
    EXPECT(all[2 * r] == 1000 * round + r);
    EXPECT(all[2 * r + 1] == -(1000 * round + r));
  }
}

static ncclResult_t wait_made(ncclComm_t comm) {
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 3000 && state == ncclInProgress; i++) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) usleep(10000);
  }
  return state;
}

static void expect_world(ncclComm_t comm) {
  MPI_Comm got = MPI_COMM_NULL;
  int same = MPI_UNEQUAL;
  EXPECT_OK(mpincclCommGetMPIComm(comm, &got));
  if (got != MPI_COMM_NULL) MPI_Comm_compare(got, MPI_COMM_WORLD, &same);
  EXPECT(same == MPI_IDENT); /* the program's own handle, not a copy */
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("2 3 4");
    return 0;
  }
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (provided != MPI_THREAD_MULTIPLE || world_size > 64) {
    if (world_rank == 0) printf("test_mpi_traffic: needs MPI_THREAD_MULTIPLE and at most 64 ranks: skipped\n");
    MPI_Finalize();
    return 77;
  }
  ncclConfig_t nonblocking = NCCL_CONFIG_INITIALIZER;
  nonblocking.blocking = 0;
  for (int made = 0; made < 2; made++) {
    ncclComm_t comm = NULL;
    if (made == 0) {
      EXPECT_OK(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL));
    } else { /* (its set-up duplicates MPI_COMM_WORLD in the background: awaited first) */
      ncclResult_t res = mpincclCommInitMPI(&comm, MPI_COMM_WORLD, &nonblocking);
      EXPECT(res == ncclInProgress || res == ncclSuccess);
      EXPECT(wait_made(comm) == ncclSuccess);
    }
    expect_world(comm);
    for (int round = 0; round < ROUNDS; round++) {
      ncclComm_t child = NULL;
      ncclResult_t res = ncclCommSplit(comm, world_rank % 2, world_rank, &child, &nonblocking);
      EXPECT(res == ncclInProgress || res == ncclSuccess);
      program_allgather(ROUNDS * made + round, round % world_size);
      EXPECT(wait_made(child) == ncclSuccess);
      int n = 0;
      EXPECT_OK(ncclCommCount(child, &n));
      EXPECT(n == (world_size + 1 - world_rank % 2) / 2);
      EXPECT_OK(ncclCommDestroy(child));
    }
    EXPECT_OK(ncclCommDestroy(comm));
  }
  return mpi_test_finish(world_rank, "test_mpi_traffic: %d ranks, ", world_size);
}
