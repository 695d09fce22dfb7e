/*
 * test_exit_watchdog.c - a communicator still live when its process exits
 * (it is never destroyed, as some programs leave it), whose peers' processes
 * exit first: the watchdog stops at the start of the exit, so that it
 * neither reports those peers gone nor fails the communicator while the
 * process goes (nor makes CUDA calls into a runtime going away).  Rank 0's
 * own exit handler, registered before the communicator is made (so it runs
 * after the library's), waits until the other processes are gone and then
 * for ten of the watchdog's periods, and checks the communicator's error.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/proc.h"
#include "mpinccl.h"

#define WATCHDOG_MS 20

static ncclComm_t comm;
static int rank, nranks;
typedef struct {
  int pid;
  uint64_t start_time;
} proc_t;
static proc_t* procs; /* every rank's process (rank 0's copy) */

static int others_exited(void) {
  for (int r = 1; r < nranks; r++)
    if (!mpn_proc_gone(procs[r].pid, procs[r].start_time)) return 0; /* (the watchdog's own test) */
  return 1;
}

static void check_at_exit(void) {
  if (rank != 0) return;
  /* (30 s: under make -j2 check on two cores a peer's exit once took more than 5) */
  for (int i = 0; i < 3000 && !others_exited(); i++) usleep(10000);
  if (!others_exited()) {
    fprintf(stderr, "test_exit_watchdog: the other processes were still there 30 s into rank 0's exit\n");
    _exit(1);
  }
  usleep(10 * WATCHDOG_MS * 1000);
  ncclResult_t async = ncclInProgress;
  ncclResult_t res = ncclCommGetAsyncError(comm, &async);
  if (res != ncclSuccess || async != ncclSuccess) {
    fprintf(stderr, "[rank 0] expected the communicator untouched during the exit, got %s (%s)\n",
            ncclGetErrorString(res != ncclSuccess ? res : async), ncclGetLastError(comm));
    printf("test_exit_watchdog: %d ranks, 1 failures\n", nranks);
    fflush(stdout);
    _exit(1);
  }
  printf("test_exit_watchdog: %d ranks, 0 failures\n", nranks);
  fflush(stdout);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("2 3");
    return 0;
  }
  char period[16];
  snprintf(period, sizeof(period), "%d", WATCHDOG_MS);
  setenv("MPINCCL_WATCHDOG_MS", period, 1);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  atexit(check_at_exit);
  procs = calloc((size_t)nranks, sizeof(*procs));
  proc_t me = {(int)getpid(), 0};
  me.start_time = mpn_proc_start_time(me.pid);
  MPI_Gather(&me, (int)sizeof(me), MPI_BYTE, procs, (int)sizeof(me), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess) {
    fprintf(stderr, "[rank %d] mpincclCommInitMPI failed: %s\n", rank, ncclGetLastError(NULL));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank != 0) usleep(200000); /* rank 0 is well into its exit when the others go */
  return 0;
}
