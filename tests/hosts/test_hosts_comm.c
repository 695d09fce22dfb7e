/*
 * test_hosts_comm.c - run by test_hosts.sh with two ranks on each of two
 * test hosts: communicators from a unique id and from MPI_COMM_WORLD must
 * see two hosts of two ranks each, choose UCX between hosts and never
 * between ranks of one host (IPC there when there are GPUs), and split by
 * host.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "mpinccl.h"
#include "transport.h"

static int world_rank, failures;

#define EXPECT(cond) \
  do { \
    if (!(cond)) { \
      fprintf(stderr, "[world %d] %s:%d: expected %s (%s)\n", world_rank, __FILE__, __LINE__, \
              #cond, ncclGetLastError(NULL)); \
      failures++; \
    } \
  } while (0)

static void check_hosts(ncclComm_t comm) {
  const mpn_topo_t* t = &comm->topo;
  EXPECT(t->n_same_host == 2);
  int hosts = 0;
  for (int p = 0; p < comm->nranks; p++) {
    int first = 1;
    for (int q = 0; q < p; q++) first &= !mpn_topo_same_host(t, p, q);
    hosts += first;
    int same = mpn_topo_same_host(t, comm->rank, p);
    int kind = comm->transport[p];
    if (p == comm->rank) EXPECT(kind == MPN_TRANSPORT_SELF);
    else if (!same) EXPECT(kind == MPN_TRANSPORT_UCX);
    else EXPECT(kind == (t->ranks[p].cuda_dev >= 0 ? MPN_TRANSPORT_IPC : MPN_TRANSPORT_UCX));
    EXPECT(same == (strcmp(t->ranks[p].host, t->ranks[comm->rank].host) == 0));
  }
  EXPECT(hosts == 2);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ncclUniqueId id;
  if (world_rank == 0) EXPECT(ncclGetUniqueId(&id) == ncclSuccess);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = NULL, world = NULL, host = NULL;
  EXPECT(ncclCommInitRank(&comm, size, id, world_rank) == ncclSuccess);
  if (comm) check_hosts(comm);
  EXPECT(mpincclCommInitMPI(&world, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (world) {
    check_hosts(world);
    /* Split by host: colour = the lowest rank on my host. */
    int color = world->rank;
    for (int p = 0; p < world->nranks; p++)
      if (mpn_topo_same_host(&world->topo, world->rank, p) && p < color) color = p;
    EXPECT(ncclCommSplit(world, color, world->rank, &host, NULL) == ncclSuccess);
    int n = 0;
    if (host) EXPECT(ncclCommCount(host, &n) == ncclSuccess);
    EXPECT(n == 2);
    if (host) EXPECT(host->topo.n_same_host == 2);
  }
  ncclCommDestroy(host);
  ncclCommDestroy(world);
  ncclCommDestroy(comm);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  char name[64];
  gethostname(name, sizeof(name));
  printf("test_hosts_comm: world rank %d on %s: %s\n", world_rank, name, total ? "FAIL" : "ok");
  MPI_Finalize();
  return total ? 1 : 0;
}
