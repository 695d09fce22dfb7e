/*
 * transport.c - per-peer transport choice.  Same process beats same host
 * beats network; MPINCCL_TRANSPORT=ucx and NCCL_P2P_DISABLE=1 push every
 * other-process peer onto UCX so that the network path is testable on one
 * host.
 */
#include "transport.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/device.h"
#include "cuda/ipc_held.h"
#ifdef HAVE_UCX
#include "ucx/ucx_probe.h"
#endif

const char* mpn_transport_name(mpn_transport_kind_t kind) {
  static const char* names[MPN_TRANSPORT_COUNT] = {"self", "local", "ipc", "ucx"};
  return (unsigned)kind < MPN_TRANSPORT_COUNT ? names[kind] : "?";
}

/*
 * Ranks of one process with peers over UCX: each lane's stream waits for
 * its proxy, and streams beyond CUDA_DEVICE_MAX_CONNECTIONS share hardware
 * queues, where a wait holds what is queued behind it.  With 1 or 2 queues
 * two ranks of one process driven by two threads hung on the GPU machine
 * (docs/UCX.md); said once per process.
 */
static long queues = -1; /* CUDA_DEVICE_MAX_CONNECTIONS, -1: unset or not a number */
static pthread_once_t queues_once = PTHREAD_ONCE_INIT;

/* Read once, on the thread that starts creation (mpn_transport_preload):
 * creation threads never read the environment (bootstrap/channel_life.c). */
static void queues_read(void) {
  const char* env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  char* end = NULL;
  long n = env ? strtol(env, &end, 10) : 0;
  queues = env && end != env ? n : -1;
}

void mpn_transport_preload(void) { pthread_once(&queues_once, queues_read); }

static void transport_warn_queues(const struct ncclComm* comm) {
  static int warned;
  mpn_transport_preload();
  if (comm->topo.n_same_process < 2 || queues < 0 || queues > 2 || __atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    return;
  MPN_WARN(
      "CUDA_DEVICE_MAX_CONNECTIONS=%ld with %d ranks in this process and peers over UCX: their streams "
      "share too few hardware queues and can hang (docs/UCX.md); leave it unset (8)",
      queues, comm->topo.n_same_process);
}

int mpn_transport_by_events(const struct ncclComm* comm, int peer) {
  int kind = comm->transport[peer];
  const mpn_topo_t* t = &comm->topo;
  return (kind == MPN_TRANSPORT_SELF || kind == MPN_TRANSPORT_LOCAL) &&
         (t->ranks[comm->rank].mps || t->ranks[peer].mps);
}

int mpn_transport_kernel_reach(const struct ncclComm* comm, int peer) {
  const mpn_topo_t* t = &comm->topo;
  return comm->transport[peer] != MPN_TRANSPORT_UCX && t->ranks[comm->rank].cuda_dev >= 0 &&
         t->ranks[peer].cuda_dev >= 0;
}

/* A peer on UCX needs a working UCX; learn what it can do, once per process. */
static ncclResult_t transport_check_ucx(struct ncclComm* comm) {
  int any = 0;
  for (int peer = 0; peer < comm->nranks; peer++) any |= comm->transport[peer] == MPN_TRANSPORT_UCX;
  if (!any) return ncclSuccess;
  if (comm->nranks > MPN_TRANSPORT_UCX_MAX_RANKS)
    return mpn_error_set(comm, ncclInvalidUsage,
                         "rank %d has peers over UCX (on other hosts, or MPINCCL_TRANSPORT=ucx) in a communicator "
                         "of %d ranks; mpinccl supports at most %d ranks there",
                         comm->rank, comm->nranks, MPN_TRANSPORT_UCX_MAX_RANKS);
  transport_warn_queues(comm);
#ifdef HAVE_UCX
  mpn_ucx_caps_t caps;
  return mpn_ucx_probe(&caps);
#else
  return mpn_error_set(comm, ncclInvalidUsage,
                       "rank %d needs the UCX transport, but mpinccl was built without UCX",
                       comm->rank);
#endif
}

/* Ranks of this process on other GPUs hand this rank plain device pointers
 * (their buffers, the flags of pairs they made): map those GPUs. */
static ncclResult_t transport_enable_peers(const struct ncclComm* comm) {
  const mpn_rank_info_t* me = &comm->topo.ranks[comm->rank];
  for (int peer = 0; peer < comm->nranks; peer++) {
    const mpn_rank_info_t* p = &comm->topo.ranks[peer];
    if (comm->transport[peer] == MPN_TRANSPORT_LOCAL && me->cuda_dev >= 0 && p->cuda_dev >= 0 &&
        p->cuda_dev != me->cuda_dev)
      MPN_CHECK(mpn_cuda_peer_enable(me->cuda_dev, p->cuda_dev));
  }
  return ncclSuccess;
}

ncclResult_t mpn_transport_choose(struct ncclComm* comm) {
  const mpn_topo_t* t = &comm->topo;
  const char* forced = mpn_param_str(MPN_PARAM_TRANSPORT);
  int force_ucx = strcasecmp(forced, "ucx") == 0 || mpn_param_int(MPN_PARAM_P2P_DISABLE) == 1;
  int force_ipc = strcasecmp(forced, "ipc") == 0;
  if (force_ucx && force_ipc)
    return mpn_error_set(comm, ncclInvalidArgument,
                         "MPINCCL_TRANSPORT=ipc contradicts NCCL_P2P_DISABLE=1");
  uint8_t* kinds = calloc((size_t)comm->nranks, 1);
  if (kinds == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  const mpn_rank_info_t* me = &t->ranks[comm->rank];
  int ipc = 0;
  for (int peer = 0; peer < comm->nranks; peer++) {
    const mpn_rank_info_t* p = &t->ranks[peer];
    mpn_transport_kind_t k;
    /* Device memory of the peer usable here: same GPU or peer access (a
     * rank without a GPU has only host memory, which a process shares). */
    int direct = me->cuda_dev < 0 || p->cuda_dev < 0 ? p->proc == me->proc : mpn_topo_direct(t, comm->rank, peer);
    if (peer == comm->rank) k = MPN_TRANSPORT_SELF;
    else if (p->proc == me->proc && direct)
      k = MPN_TRANSPORT_LOCAL;
    else if (!force_ucx && direct) /* another process: the same one took LOCAL above */
      k = MPN_TRANSPORT_IPC;
    else k = MPN_TRANSPORT_UCX;
    if (force_ipc && k == MPN_TRANSPORT_UCX) {
      free(kinds);
      return mpn_error_set(comm, ncclInvalidUsage,
                           "MPINCCL_TRANSPORT=ipc, but rank %d (host %s, GPU %s) cannot be reached by "
                           "CUDA IPC from rank %d (host %s, GPU %s): another host, or no peer access",
                           peer, p->host, p->cuda_dev >= 0 ? p->pci_bus : "none", comm->rank, me->host,
                           me->cuda_dev >= 0 ? me->pci_bus : "none");
    }
    kinds[peer] = (uint8_t)k;
    ipc |= k == MPN_TRANSPORT_IPC;
  }
  /* Peers read which imports this process holds before they share a new
   * allocation with it (cuda/ipc_held.h): published before its first one. */
  if (ipc) mpn_ipc_held_publish();
  free(comm->transport);
  comm->transport = kinds;
  MPN_CHECK(transport_enable_peers(comm));
  return transport_check_ucx(comm);
}

void mpn_transport_log(const struct ncclComm* comm) {
  if (!mpn_log_enabled(MPN_LOG_INFO, MPN_SUBSYS_INIT)) return;
  int count[MPN_TRANSPORT_COUNT] = {0};
  char line[512];
  int n = 0;
  for (int peer = 0; peer < comm->nranks; peer++) {
    count[comm->transport[peer]]++;
    if (peer < 32 && n < (int)sizeof(line))
      n += snprintf(line + n, sizeof(line) - n, " %d:%s", peer,
                    mpn_transport_name(comm->transport[peer]));
  }
  MPN_INFO(MPN_SUBSYS_INIT, "rank %d transports per peer:%s%s (self %d, local %d, ipc %d, ucx %d)",
           comm->rank, line, comm->nranks > 32 ? " ..." : "", count[0], count[1], count[2],
           count[3]);
}
