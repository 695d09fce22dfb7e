/*
 * test_bootstrap_mpi.c - the bootstrap module between processes (no CUDA):
 * rendezvous, allgather of several sizes, broadcast, barrier, tagged
 * messages that arrive before they are received, split, contexts from an
 * MPI communicator, and many contexts alive at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"

static int world_rank, world_size, failures;

#define EXPECT(cond) \
  do { \
    if (!(cond)) { \
      fprintf(stderr, "[world %d] %s:%d: expected %s\n", world_rank, __FILE__, __LINE__, #cond); \
      failures++; \
    } \
  } while (0)
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

static void exercise(mpn_bootstrap_t* b) {
  int n = b->nranks, me = b->rank;
  for (size_t size = 1; size <= 65536; size *= 16) {
    unsigned char* buf = malloc(size * (size_t)n);
    memset(buf + size * (size_t)me, me + 1, size);
    EXPECT_OK(mpn_bootstrap_allgather(b, buf, size));
    for (int r = 0; r < n; r++) EXPECT(buf[size * (size_t)r + size - 1] == (unsigned char)(r + 1));
    free(buf);
  }
  double v = me == n - 1 ? 3.25 : 0;
  EXPECT_OK(mpn_bootstrap_bcast(b, &v, sizeof(v), n - 1));
  EXPECT(v == 3.25);
  EXPECT_OK(mpn_bootstrap_barrier(b));
  /* Sends first, to every peer, with two tags; receives in the other order. */
  for (int p = 0; p < n; p++) {
    int msg[2] = {me, p};
    EXPECT_OK(mpn_bootstrap_send(b, p, 1, msg, sizeof(msg)));
    msg[1] = -p;
    EXPECT_OK(mpn_bootstrap_send(b, p, 2, msg, sizeof(msg)));
  }
  for (int p = n - 1; p >= 0; p--) {
    int msg[2];
    EXPECT_OK(mpn_bootstrap_recv(b, p, 2, msg, sizeof(msg)));
    EXPECT(msg[0] == p && msg[1] == -me);
    EXPECT_OK(mpn_bootstrap_recv(b, p, 1, msg, sizeof(msg)));
    EXPECT(msg[0] == p && msg[1] == me);
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("1 2 3 4");
    return 0;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "60", 1);

  mpn_bootstrap_id_t id;
  if (world_rank == 0) EXPECT_OK(mpn_bootstrap_id_create(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  EXPECT(id.flags & MPN_BOOTSTRAP_ID_MPI);
  mpn_bootstrap_t* b = NULL;
  /* Reverse order: rank world_size-1 arrives first. */
  usleep(1000 * (world_size - world_rank));
  EXPECT_OK(mpn_bootstrap_rendezvous(&id, world_size, world_size - 1 - world_rank, NULL, &b));
  EXPECT(b && b->eps[b->rank].world == world_rank);
  exercise(b);

  /* Split into singletons and pairs, exercised concurrently with the parent. */
  mpn_bootstrap_t *pairs = NULL, *none = (mpn_bootstrap_t*)0x1;
  EXPECT_OK(mpn_bootstrap_split(b, b->rank / 2, b->rank, NULL, &pairs));
  EXPECT_OK(mpn_bootstrap_split(b, -1, 0, NULL, &none));
  EXPECT(none == NULL);
  EXPECT(pairs->rank == b->rank % 2);
  exercise(pairs);
  exercise(b);

  /* A context from an MPI communicator: rank = MPI rank. */
  mpn_bootstrap_t* m = NULL;
  EXPECT_OK(mpn_bootstrap_from_mpi(MPI_COMM_WORLD, NULL, &m));
  EXPECT(m->rank == world_rank && m->nranks == world_size);
  exercise(m);

  /* The same id serves a second rendezvous once the first is done. */
  mpn_bootstrap_t* again = NULL;
  EXPECT_OK(mpn_bootstrap_rendezvous(&id, world_size, world_rank, NULL, &again));
  EXPECT(again && again->key != b->key);
  exercise(again);

  mpn_bootstrap_destroy(again);
  mpn_bootstrap_destroy(m);
  mpn_bootstrap_destroy(pairs);
  mpn_bootstrap_destroy(b);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) printf("test_bootstrap_mpi: %d ranks, %d failures\n", world_size, total);
  MPI_Finalize();
  return total ? 1 : 0;
}
