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
#include <errno.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "mpinccl.h"

#define WATCHDOG_MS 20

static ncclComm_t comm;
static int rank, nranks;
static int* pids; /* every rank's process (rank 0's copy) */

/* Whether process pid has exited (not a child of ours: gone once reaped,
 * or a zombie until then). */
static int exited(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (f == NULL) return 1;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char* state = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  return state && state[1] == ' ' && (state[2] == 'Z' || state[2] == 'X');
}

static int others_exited(void) {
  for (int r = 1; r < nranks; r++)
    if (!exited(pids[r])) return 0;
  return 1;
}

static void check_at_exit(void) {
  if (rank != 0) return;
  for (int i = 0; i < 500 && !others_exited(); i++) usleep(10000);
  if (!others_exited()) {
    fprintf(stderr, "test_exit_watchdog: the other processes were still there 5 s into rank 0's exit\n");
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
  pids = calloc((size_t)nranks, sizeof(*pids));
  int me = (int)getpid();
  MPI_Gather(&me, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) != ncclSuccess) {
    fprintf(stderr, "[rank %d] mpincclCommInitMPI failed: %s\n", rank, ncclGetLastError(NULL));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  if (rank != 0) usleep(200000); /* rank 0 is well into its exit when the others go */
  return 0;
}
