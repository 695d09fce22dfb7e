/*
 * test_hosts_comm.c - run by test_hosts.sh with two ranks on each of two
 * test hosts: communicators from a unique id and from MPI_COMM_WORLD must
 * see two hosts of two ranks each, choose UCX between hosts and never
 * between ranks of one host (IPC there when there are GPUs), split by host,
 * and move host memory around the ring through UCX from host to host, with
 * tagged messages and with one-sided puts whose signals follow the data.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/comm.h"
#include "mpinccl.h"
#include "transport.h"
#ifdef HAVE_UCX
#include <stdlib.h>
#include <time.h>

#include "ucx/net.h"
#include "ucx/rma.h"
#endif

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

#ifdef HAVE_UCX
/* Host memory around the ring of world ranks through UCX, across the hosts. */
static void ucx_ring(ncclComm_t comm) {
  enum { BYTES = 1 << 20 };
  int n = comm->nranks, to = (comm->rank + 1) % n, from = (comm->rank + n - 1) % n;
  unsigned char *s = malloc(BYTES), *r = calloc(BYTES, 1);
  for (int i = 0; i < BYTES; i++) s[i] = (unsigned char)(comm->rank * 37 + i * 13);
  uint64_t flags[2] = {0, 0};
  int error = 0;
  if (comm->transport[to] == MPN_TRANSPORT_UCX && comm->transport[from] == MPN_TRANSPORT_UCX) {
    EXPECT(mpn_ucx_host_recv(comm, from, r, BYTES, &flags[0], 1, &error) == ncclSuccess);
    EXPECT(mpn_ucx_host_send(comm, to, s, BYTES, &flags[1], 1, &error) == ncclSuccess);
    time_t end = time(NULL) + 30;
    while ((__atomic_load_n(&flags[0], __ATOMIC_ACQUIRE) != 1 || __atomic_load_n(&flags[1], __ATOMIC_ACQUIRE) != 1) &&
           time(NULL) < end) {
    }
    EXPECT(flags[0] == 1 && flags[1] == 1 && error == 0);
    int bad = 0;
    for (int i = 0; i < BYTES; i++) bad += r[i] != (unsigned char)(from * 37 + i * 13);
    EXPECT(bad == 0);
  }
  free(s);
  free(r);
}

/* The same ring one-sided: a put into the next rank's region whose signal,
 * a counter in another region, must come after the data. */
static void ucx_put_ring(ncclComm_t comm) {
  enum { BYTES = 1 << 20 };
  int n = comm->nranks, to = (comm->rank + 1) % n, from = (comm->rank + n - 1) % n;
  unsigned char *s = malloc(BYTES), *r = calloc(BYTES, 1);
  uint64_t counter = 0, flag = 0;
  int error = 0;
  for (int i = 0; i < BYTES; i++) s[i] = (unsigned char)(comm->rank * 29 + i * 7);
  mpn_ucx_region_t *data = NULL, *sig = NULL;
  EXPECT(mpn_ucx_region_register(comm, r, BYTES, &data) == ncclSuccess);
  EXPECT(mpn_ucx_region_register(comm, &counter, sizeof(counter), &sig) == ncclSuccess);
  if (data && sig && comm->transport[to] == MPN_TRANSPORT_UCX && comm->transport[from] == MPN_TRANSPORT_UCX) {
    EXPECT(mpn_ucx_host_put_signal(comm, to, s, BYTES, data, 0, sig, 0, &flag, 1, &error) == ncclSuccess);
    time_t end = time(NULL) + 30;
    while ((__atomic_load_n(&counter, __ATOMIC_ACQUIRE) != 1 || __atomic_load_n(&flag, __ATOMIC_ACQUIRE) != 1) &&
           time(NULL) < end) {
    }
    EXPECT(counter == 1 && flag == 1 && error == 0);
    int bad = 0;
    for (int i = 0; i < BYTES; i++) bad += r[i] != (unsigned char)(from * 29 + i * 7);
    EXPECT(bad == 0);
  }
  if (data) EXPECT(mpn_ucx_region_deregister(comm, data) == ncclSuccess);
  if (sig) EXPECT(mpn_ucx_region_deregister(comm, sig) == ncclSuccess);
  free(s);
  free(r);
}
#endif

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
#ifdef HAVE_UCX
    ucx_ring(world);
    MPI_Barrier(MPI_COMM_WORLD);
    ucx_put_ring(world);
    MPI_Barrier(MPI_COMM_WORLD);
#endif
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
