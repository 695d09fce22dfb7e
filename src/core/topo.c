/*
 * topo.c - rank descriptions and the sharing relations derived from them.
 * Two ranks share a GPU when their hosts and device UUIDs are equal; the
 * regime that matters for performance (several processes on one GPU, with or
 * without MPS) is reported here once.
 */
#include "core/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/proc.h"
#include "cuda/device.h"
#include "cuda/driver.h"

#define FNV1A_START 0xcbf29ce484222325ull

static uint64_t fnv1a(uint64_t h, const char* s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

uint64_t mpn_topo_bus_hash(const char bus[16]) {
  char s[17];
  memcpy(s, bus, 16);
  s[16] = '\0';
  return fnv1a(FNV1A_START, s);
}

/* The other devices of this process that device does not map both ways. */
static void describe_apart(int device, mpn_rank_info_t* r) {
  int count = mpn_cuda_device_count();
  for (int d = 0; d < count && r->napart < MPN_TOPO_APART; d++) {
    char bus[16];
    if (d != device && !mpn_cuda_peer_capable(device, d) && mpn_cuda_bus_id(d, bus) == ncclSuccess)
      r->apart[r->napart++] = mpn_topo_bus_hash(bus);
  }
}

/* Host identity: name plus boot id, so that containers sharing a name
 * differ, plus the /dev/shm the process shares files through (the pair
 * files of CUDA IPC peers, p2p/pair.c): containers of one machine with a
 * /dev/shm each (host network and name, no shared IPC namespace) are hosts
 * apart for the library, reached over UCX, where they used to take CUDA IPC
 * and never meet in their pair files. */
static uint64_t host_hash(const char* host) {
  uint64_t h = fnv1a(FNV1A_START, host);
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    char boot[64] = "";
    if (fgets(boot, sizeof(boot), f)) h = fnv1a(h, boot);
    fclose(f);
  }
  struct stat st;
  if (stat("/dev/shm", &st) == 0) {
    char shm[48];
    snprintf(shm, sizeof(shm), "shm %llx:%llx", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino);
    h = fnv1a(h, shm);
  }
  return h;
}

ncclResult_t mpn_topo_describe_self(int device, mpn_rank_info_t* out) {
  mpn_rank_info_t r;
  memset(&r, 0, sizeof(r));
  gethostname(r.host, sizeof(r.host) - 1);
  r.host_hash = host_hash(r.host);
  r.proc = mpn_chan_proc_id();
  r.pid = (int32_t)getpid();
  r.pidns = mpn_proc_pidns();
  r.start_time = mpn_proc_start_time(r.pid); /* tells this process from a later one given its pid */
  r.world = mpn_chan_self().world;
  r.cuda_dev = device;
  r.numa = -1;
  if (device >= 0) {
    mpn_cuda_info_t info;
    MPN_CHECK(mpn_cuda_device_info(device, &info));
    memcpy(r.uuid, info.uuid, sizeof(r.uuid));
    memcpy(r.pci_bus, info.pci_bus, sizeof(r.pci_bus));
    r.mps = info.mps;
    r.cc = info.cc;
    r.wait_nor = mpn_driver_wait_nor(device);
    r.numa = mpn_numa_node_of_pci(info.pci_bus);
    describe_apart(device, &r);
  }
  *out = r;
  return ncclSuccess;
}

int mpn_topo_same_gpu(const mpn_topo_t* t, int a, int b) {
  const mpn_rank_info_t *x = &t->ranks[a], *y = &t->ranks[b];
  return x->cuda_dev >= 0 && y->cuda_dev >= 0 && x->host_hash == y->host_hash &&
         memcmp(x->uuid, y->uuid, sizeof(x->uuid)) == 0;
}

/* x lists y's GPU among those out of its reach. */
static int apart(const mpn_rank_info_t* x, const mpn_rank_info_t* y) {
  uint64_t h = mpn_topo_bus_hash(y->pci_bus);
  for (int i = 0; i < x->napart && i < MPN_TOPO_APART; i++)
    if (x->apart[i] == h) return 1;
  return 0;
}

int mpn_topo_direct(const mpn_topo_t* t, int a, int b) {
  const mpn_rank_info_t *x = &t->ranks[a], *y = &t->ranks[b];
  if (x->cuda_dev < 0 || y->cuda_dev < 0 || x->host_hash != y->host_hash) return 0;
  if (mpn_topo_same_gpu(t, a, b)) return 1;
  /* One PCI device under two CUDA device UUIDs: instances of a GPU split by
   * MIG, between which CUDA IPC does not work (and neither process sees the
   * other's instance, so neither could list it as apart). */
  if (memcmp(x->pci_bus, y->pci_bus, sizeof(x->pci_bus)) == 0) return 0;
  return !apart(x, y) && !apart(y, x);
}

ncclResult_t mpn_topo_discover(struct ncclComm* comm) {
  mpn_topo_t* t = &comm->topo;
  int n = comm->nranks, me = comm->rank;
  MPN_CALLOC(t->ranks, n);
  MPN_CALLOC(t->gpu_leader, n);
  MPN_CALLOC(t->gpu_sliced, n);
  MPN_CHECK(mpn_topo_describe_self(comm->cuda_dev, &t->ranks[me]));
  t->ranks[me].num_rma_ctx = comm->config.num_rma_ctx;
  MPN_CHECK(mpn_bootstrap_allgather(comm->bootstrap, t->ranks, sizeof(*t->ranks)));
  /* The signal counters and areas are laid out per context on both sides
   * of a pair: ranks that disagree would read each other's signals at the
   * wrong places.  Every rank sees the same table, so all refuse alike. */
  for (int i = 1; i < n; i++)
    if (t->ranks[i].num_rma_ctx != t->ranks[0].num_rma_ctx)
      return MPN_REFUSE(comm, ncclInvalidArgument,
                        "rank 0 has numRmaCtx %d, rank %d has %d: every rank of a communicator must have the same "
                        "(ncclConfig_t.numRmaCtx, or NCCL_NUM_RMA_CTX)",
                        t->ranks[0].num_rma_ctx, i, t->ranks[i].num_rma_ctx);
  t->n_same_host = t->n_same_process = t->n_same_gpu = 0;
  t->shared_gpu_no_mps = 0;
  for (int i = 0; i < n; i++) {
    t->gpu_leader[i] = i;
    for (int j = 0; j < i; j++) {
      if (!mpn_topo_same_gpu(t, i, j)) continue;
      t->gpu_leader[i] = t->gpu_leader[j];
      if (t->ranks[i].proc != t->ranks[j].proc && !(t->ranks[i].mps && t->ranks[j].mps))
        t->shared_gpu_no_mps = 1;
      break;
    }
    for (int j = 0; j < i; j++)
      if (mpn_topo_same_gpu(t, i, j) && t->ranks[i].proc != t->ranks[j].proc &&
          !(t->ranks[i].mps && t->ranks[j].mps))
        t->gpu_sliced[i] = t->gpu_sliced[j] = 1;
    t->n_same_host += mpn_topo_same_host(t, i, me);
    t->n_same_process += t->ranks[i].proc == t->ranks[me].proc;
    t->n_same_gpu += mpn_topo_same_gpu(t, i, me);
  }
  return ncclSuccess;
}

void mpn_topo_free(mpn_topo_t* t) {
  free(t->ranks);
  free(t->gpu_leader);
  free(t->gpu_sliced);
  t->ranks = NULL;
  t->gpu_leader = NULL;
  t->gpu_sliced = NULL;
}

/* Lists the ranks on the GPU whose leader is lead, as "0,1,4". */
static void ranks_on_gpu(const mpn_topo_t* t, int n, int lead, char* buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used + 12 < size; i++)
    if (t->gpu_leader[i] == lead)
      used += (size_t)snprintf(buf + used, size - used, used ? ",%d" : "%d", i);
}

void mpn_topo_log(const struct ncclComm* comm) {
  const mpn_topo_t* t = &comm->topo;
  const mpn_rank_info_t* r = &t->ranks[comm->rank];
  MPN_INFO(MPN_SUBSYS_INIT,
           "comm %p rank %d nranks %d host %s pid %d world %d cudaDev %d busId %s numa %d mps %d "
           "(ranks on this host %d, in this process %d, on this GPU %d)",
           (const void*)comm, comm->rank, comm->nranks, r->host, r->pid, r->world, r->cuda_dev,
           r->cuda_dev >= 0 ? r->pci_bus : "-", r->numa, r->mps, t->n_same_host, t->n_same_process,
           t->n_same_gpu);
  if (comm->rank != 0 || !mpn_log_enabled(MPN_LOG_INFO, MPN_SUBSYS_INIT)) return;
  for (int i = 0; i < comm->nranks; i++) {
    if (t->gpu_leader[i] != i || t->ranks[i].cuda_dev < 0) continue;
    char list[256];
    ranks_on_gpu(t, comm->nranks, i, list, sizeof(list));
    MPN_INFO(MPN_SUBSYS_INIT, "GPU %s on %s: ranks %s, MPS %s", t->ranks[i].pci_bus,
             t->ranks[i].host, list, t->ranks[i].mps ? "on" : "off");
  }
}
