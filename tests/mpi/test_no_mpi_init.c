/*
 * test_no_mpi_init.c - a program started by mpirun that never calls MPI
 * itself: the library initializes MPI on its own (and finalizes it at exit;
 * mpirun fails the job if a process initialized MPI and exited without
 * finalizing).  The unique id travels through a file, as programs without
 * MPI do it.  A child of fork() that exits leaves MPI to its parent.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "mpinccl.h"

static int env_int(const char* a, const char* b) {
  const char* v = getenv(a);
  if (v == NULL) v = getenv(b);
  return v ? atoi(v) : -1;
}

/* A child of fork() made once the library started MPI exits (exit, its
 * handlers run) within 20 s.  It used to call MPI_Finalize at its exit as
 * the library's parent would, and hung in it. */
static int forked_child_exits(void) {
  pid_t pid = fork();
  if (pid == 0) exit(0);
  int status = 0;
  pid_t done = 0;
  for (int i = 0; pid > 0 && i < 2000 && (done = waitpid(pid, &status, WNOHANG)) == 0; i++) usleep(10000);
  if (done == pid) return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  fprintf(stderr, "test_no_mpi_init: a child of fork() %s\n", pid > 0 ? "did not exit within 20 s" : "not made");
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("1 2 4");
    return 0;
  }
  int rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK");
  int size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE");
  if (rank < 0 || size < 1) {
    fprintf(stderr, "test_no_mpi_init: not started by mpirun\n");
    return 1;
  }
  int inited = 1;
  MPI_Initialized(&inited);
  if (inited) return 1;
  /* A file name all ranks of this job agree on: the launcher's namespace, or
   * the shared parent (mpirun's daemon on one host). */
  const char* job = getenv("PMIX_NAMESPACE");
  char path[512], tmp[520];
  snprintf(path, sizeof(path), "%s/mpinccl-id-%s-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           job ? job : "job", (int)getppid());
  for (char* p = path + 5; *p; p++)
    if (*p == '.' || *p == ':') *p = '_';
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) return 1;
  } else {
    FILE* f = NULL;
    for (int i = 0; i < 6000 && !(f = fopen(path, "rb")); i++) usleep(10000);
    if (!f || fread(&id, sizeof(id), 1, f) != 1) {
      fprintf(stderr, "rank %d: cannot read the unique id from %s\n", rank, path);
      return 1;
    }
    fclose(f);
  }
  ncclComm_t comm;
  ncclResult_t res = ncclCommInitRank(&comm, size, id, rank);
  int n = -1, r = -1;
  if (res == ncclSuccess) res = ncclCommCount(comm, &n);
  if (res == ncclSuccess) res = ncclCommUserRank(comm, &r);
  int ok = res == ncclSuccess && n == size && r == rank && mpn_chan_mpi_owned();
  MPI_Initialized(&inited);
  ok &= inited; /* the library started MPI */
  ok &= forked_child_exits();
  if (res == ncclSuccess) ncclCommDestroy(comm);
  if (rank == 0) {
    /* Everybody has read the id once the communicator exists. */
    unlink(path);
  }
  if (!ok) fprintf(stderr, "rank %d: %s (%s)\n", rank, ncclGetErrorString(res), ncclGetLastError(NULL));
  else if (rank == 0) printf("test_no_mpi_init: %d ranks ok\n", size);
  return ok ? 0 : 1;
}
