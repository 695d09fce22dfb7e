/*
 * net.c - per-communicator UCX state and tagged transfers of host memory.
 * Tags (see comm_tag below) carry the communicator (24 bits of its key) and
 * the sender, so messages of different communicators and senders never
 * match each other and those of one pair match in order.  The host-memory
 * tags do not carry the receiver: two ranks of one process (one worker)
 * receiving from one sender on one communicator could take each other's
 * messages; the staged tags of device data carry it.
 */
#include "ucx/net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "transport.h"
#include "ucx/net_comm.h"
#include "ucx/proxy.h"

#define MPN_UCX_ADDR_MAX 4096

struct mpn_ucx_comm {
  mpn_ucx_peer_t* peers;  /* nranks; address NULL for peers not on UCX */
  uint64_t *send_seq, *recv_seq;
  int nranks, rank;
  int error;              /* an ncclResult_t set by the proxy when a transfer fails */
  int reported;           /* error already folded into the async error */
  int notice_from;        /* the abort notice's payload: the rank that aborted */
  int aborted_by;         /* that rank once the notice came, else -1 */
  uint64_t notice_done;   /* the notice receive's flag */
  mpn_ucx_mismatch_t mismatch; /* the first receive of another size than its message */
};

/* Tags: 24 bits of the communicator, then either (bit 39 clear) 19 bits of
 * the source rank and 20 of a message number, or (bit 39 set, staged device
 * data, ucx/staged.c) 13 bits of the source, 13 of the destination (more
 * than 8192 ranks alias), 6 of the message and 7 of the chunk (127: a
 * message captured in a CUDA graph, ucx/graph.c, numbered by the message
 * field).  A lane
 * posts at most 32 receives at once (MPINCCL_UCX_DEPTH), whose tags differ
 * (fewer than either field wraps at); a sender may run ahead (eager sends
 * complete locally) so equal tags can wait together among the unexpected
 * messages, and they still pair correctly because UCX matches the messages
 * of one endpoint in order and both sides post in the same order. */
static uint64_t comm_tag(const struct ncclComm* comm) {
  return ((comm->bootstrap->key ^ (comm->bootstrap->key >> 24)) & 0xffffff) << 40;
}

/* Message numbers start at 1 and wrap past 0: number 0 is the abort
 * notice's (notice_tag). */
static uint64_t make_tag(const struct ncclComm* comm, int src, uint64_t seq) {
  return comm_tag(comm) | ((uint64_t)src & 0x7ffff) << 20 | (1 + (seq - 1) % 0xfffff);
}

/* The notice a rank that aborts sends each UCX peer: addressed by the
 * receiver (ranks of one process share a worker), the sender in the data. */
static uint64_t notice_tag(const struct ncclComm* comm, int dst) { return make_tag(comm, dst, 1) & ~0xfffffull; }

static uint64_t staged_tag(const struct ncclComm* comm, int src, int dst, uint64_t msg, uint64_t chunk) {
  return comm_tag(comm) | 1ull << 39 | ((uint64_t)src & 0x1fff) << 26 |
         ((uint64_t)dst & 0x1fff) << 13 | (msg & 0x3f) << 7 | chunk;
}

/* Chunks number 0 to 126 (wrapping, which order-matching allows); 127 marks
 * a captured message (mpn_ucx_graph_tag). */
uint64_t mpn_ucx_stage_tag(const struct ncclComm* comm, int src, int dst, uint64_t msg,
                           uint64_t chunk) {
  return staged_tag(comm, src, dst, msg, chunk % 127);
}

uint64_t mpn_ucx_graph_tag(const struct ncclComm* comm, int src, int dst, uint64_t n) {
  return staged_tag(comm, src, dst, n, 127);
}

/* On the proxy thread, once a peer's abort notice came: everything with
 * that peer fails (its streams' waits are released), and the communicator
 * reports it (mpn_ucx_poll_errors). */
static void notice_arrived(void* arg) {
  struct mpn_ucx_comm* u = arg;
  int from = u->notice_from;
  if (from < 0 || from >= u->nranks || u->peers[from].address == NULL) {
    MPN_WARN("UCX: an abort notice names rank %d, which is no UCX peer of rank %d", from, u->rank);
    return;
  }
  __atomic_store_n(&u->aborted_by, from, __ATOMIC_RELEASE);
  int ok = ncclSuccess;
  __atomic_compare_exchange_n(&u->error, &ok, (int)ncclRemoteError, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
  mpn_ucx_proxy_fail_peer(&u->peers[from]);
}

/* Posts the receive of the peers' abort notices (one: the first ends the
 * communicator); it is cancelled, quietly, when the communicator closes. */
static ncclResult_t notice_post(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  mpn_ucx_cmd_t cmd = {.kind = MPN_UCX_RECV,
                       .owner = u,
                       .buf = &u->notice_from,
                       .bytes = sizeof(u->notice_from),
                       .tag = notice_tag(comm, comm->rank),
                       .flag = &u->notice_done,
                       .value = 1,
                       .fn = notice_arrived,
                       .arg = u,
                       .quiet = 1};
  return mpn_ucx_proxy_post(&cmd);
}

typedef struct {
  uint32_t len;
  char bytes[MPN_UCX_ADDR_MAX];
} addr_slot_t;

ncclResult_t mpn_ucx_comm_setup(struct ncclComm* comm) {
  int any = 0;
  for (int p = 0; p < comm->nranks; p++) any |= comm->transport[p] == MPN_TRANSPORT_UCX;
  /* Collective: every rank takes part in the exchange if any rank needs it. */
  int needed[1] = {any};
  int* all = calloc((size_t)comm->nranks, sizeof(int));
  if (all == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  all[comm->rank] = needed[0];
  ncclResult_t res = mpn_bootstrap_allgather(comm->bootstrap, all, sizeof(int));
  int someone = 0;
  for (int p = 0; p < comm->nranks && res == ncclSuccess; p++) someone |= all[p];
  free(all);
  if (res != ncclSuccess || !someone) return res;
  addr_slot_t* slots = calloc((size_t)comm->nranks, sizeof(*slots));
  struct mpn_ucx_comm* u = calloc(1, sizeof(*u));
  if (slots == NULL || u == NULL) {
    free(slots);
    free(u);
    return mpn_error_set(comm, ncclSystemError, "out of memory");
  }
  comm->ucx = u;
  u->nranks = comm->nranks;
  u->rank = comm->rank;
  u->aborted_by = -1;
  const void* addr = NULL;
  size_t len = 0;
  const mpn_rank_info_t* me = &comm->topo.ranks[comm->rank];
  if (any) res = mpn_ucx_proxy_start(me->cuda_dev >= 0 ? me->pci_bus : NULL, &addr, &len);
  if (res == ncclSuccess && len > MPN_UCX_ADDR_MAX)
    res = mpn_error_set(comm, ncclInternalError, "UCX worker address of %zu bytes is too long", len);
  if (res == ncclSuccess && any) {
    slots[comm->rank].len = (uint32_t)len;
    memcpy(slots[comm->rank].bytes, addr, len);
  }
  /* Everybody joins the allgather, even after a local failure, so nobody waits. */
  ncclResult_t gathered = mpn_bootstrap_allgather(comm->bootstrap, slots, sizeof(*slots));
  if (res == ncclSuccess) res = gathered;
  if (res == ncclSuccess) {
    u->peers = calloc((size_t)comm->nranks, sizeof(*u->peers));
    u->send_seq = calloc((size_t)comm->nranks, sizeof(uint64_t));
    u->recv_seq = calloc((size_t)comm->nranks, sizeof(uint64_t));
    if (!u->peers || !u->send_seq || !u->recv_seq) res = mpn_error_set(comm, ncclSystemError, "out of memory");
  }
  for (int p = 0; p < comm->nranks && res == ncclSuccess; p++) {
    if (comm->transport[p] != MPN_TRANSPORT_UCX || slots[p].len == 0) continue;
    u->peers[p].address = malloc(slots[p].len);
    if (u->peers[p].address == NULL) res = mpn_error_set(comm, ncclSystemError, "out of memory");
    else memcpy(u->peers[p].address, slots[p].bytes, slots[p].len);
    u->peers[p].address_len = slots[p].len;
  }
  free(slots);
  if (res == ncclSuccess && any) res = notice_post(comm);
  return res;
}

int mpn_ucx_comm_ready(const struct ncclComm* comm) { return comm->ucx && comm->ucx->peers; }

mpn_ucx_peer_t* mpn_ucx_comm_peer(struct ncclComm* comm, int peer) {
  struct mpn_ucx_comm* u = comm->ucx;
  if (u == NULL || u->peers == NULL || peer < 0 || peer >= comm->nranks || u->peers[peer].address == NULL)
    return NULL;
  return &u->peers[peer];
}

int* mpn_ucx_comm_error(struct ncclComm* comm) { return &comm->ucx->error; }

static ncclResult_t tagged_op(struct ncclComm* comm, mpn_ucx_cmd_kind_t kind, int peer, void* buf,
                              size_t bytes, uint64_t tag, const mpn_ucx_trigger_t* when,
                              uint64_t* flag, uint64_t value, int* error, uint64_t* release,
                              int nrelease) {
  struct mpn_ucx_comm* u = comm->ucx;
  mpn_ucx_cmd_t cmd = {.kind = kind,
                       .owner = u,
                       .peer = &u->peers[peer],
                       .buf = buf,
                       .bytes = bytes,
                       .tag = tag,
                       .flag = flag,
                       .value = value,
                       .error = error,
                       .owner_error = &u->error,
                       .trigger = when ? when->word : NULL,
                       .trigger_value = when ? when->value : 0,
                       .release = release,
                       .nrelease = nrelease,
                       .user_buffer = when ? when->user_buffer : 0,
                       .mismatch = kind == MPN_UCX_RECV ? &u->mismatch : NULL,
                       .from = peer};
  return mpn_ucx_proxy_post(&cmd);
}

static ncclResult_t host_op(struct ncclComm* comm, mpn_ucx_cmd_kind_t kind, int peer, void* buf,
                            size_t bytes, const mpn_ucx_trigger_t* when, uint64_t* flag,
                            uint64_t value, int* error) {
  struct mpn_ucx_comm* u = comm->ucx;
  if (mpn_ucx_comm_peer(comm, peer) == NULL)
    return mpn_error_set(comm, ncclInvalidUsage, "rank %d is not a UCX peer of rank %d", peer, comm->rank);
  uint64_t tag = kind == MPN_UCX_SEND ? make_tag(comm, comm->rank, ++u->send_seq[peer])
                                      : make_tag(comm, peer, ++u->recv_seq[peer]);
  return tagged_op(comm, kind, peer, buf, bytes, tag, when, flag, value, error, NULL, 0);
}

ncclResult_t mpn_ucx_tagged_on(struct ncclComm* comm, int send, int peer, void* buf, size_t bytes,
                               uint64_t tag, const mpn_ucx_trigger_t* when, uint64_t* flag,
                               uint64_t value, int* error, uint64_t* release, int nrelease) {
  if (mpn_ucx_comm_peer(comm, peer) == NULL)
    return mpn_error_set(comm, ncclInvalidUsage, "rank %d is not a UCX peer of rank %d", peer, comm->rank);
  return tagged_op(comm, send ? MPN_UCX_SEND : MPN_UCX_RECV, peer, buf, bytes, tag, when, flag,
                   value, error, release, nrelease);
}

ncclResult_t mpn_ucx_host_send_on(struct ncclComm* comm, int peer, const void* buf, size_t bytes,
                                  const mpn_ucx_trigger_t* when, uint64_t* flag, uint64_t value,
                                  int* error) {
  return host_op(comm, MPN_UCX_SEND, peer, (void*)buf, bytes, when, flag, value, error);
}

ncclResult_t mpn_ucx_host_recv_on(struct ncclComm* comm, int peer, void* buf, size_t bytes,
                                  const mpn_ucx_trigger_t* when, uint64_t* flag, uint64_t value,
                                  int* error) {
  return host_op(comm, MPN_UCX_RECV, peer, buf, bytes, when, flag, value, error);
}

ncclResult_t mpn_ucx_host_send(struct ncclComm* comm, int peer, const void* buf, size_t bytes,
                               uint64_t* flag, uint64_t value, int* error) {
  return mpn_ucx_host_send_on(comm, peer, buf, bytes, NULL, flag, value, error);
}

ncclResult_t mpn_ucx_host_recv(struct ncclComm* comm, int peer, void* buf, size_t bytes,
                               uint64_t* flag, uint64_t value, int* error) {
  return mpn_ucx_host_recv_on(comm, peer, buf, bytes, NULL, flag, value, error);
}

void mpn_ucx_comm_free(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  if (u == NULL) return;
  if (u->peers) {
    mpn_ucx_proxy_close(u, u->peers, comm->nranks);
    for (int p = 0; p < comm->nranks; p++) free(u->peers[p].address);
  }
  free(u->peers);
  free(u->send_seq);
  free(u->recv_seq);
  free(u);
  comm->ucx = NULL;
}

void mpn_ucx_peer_lost(struct ncclComm* comm, int peer) {
  mpn_ucx_peer_t* p = mpn_ucx_comm_peer(comm, peer);
  if (p && mpn_ucx_proxy_peer_lost(comm->ucx, p) != ncclSuccess)
    MPN_WARN("rank %d is gone, and its UCX operations could not be failed: out of memory", peer);
}

void mpn_ucx_poll_errors(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  int error = u ? __atomic_load_n(&u->error, __ATOMIC_ACQUIRE) : ncclSuccess;
  if (u == NULL || u->reported || error == ncclSuccess) return;
  u->reported = 1;
  int from = __atomic_load_n(&u->aborted_by, __ATOMIC_ACQUIRE);
  const mpn_ucx_mismatch_t* m = &u->mismatch; /* written before the error (proxy.c, recv_done) */
  if (error == ncclInvalidUsage && m->claimed) {
    char came[48];
    if (m->longer)
      snprintf(came, sizeof(came), "more came");
    else
      snprintf(came, sizeof(came), "%zu came", m->got);
    mpn_error_set(comm, ncclInvalidUsage,
                  "a message from rank %d to rank %d over UCX does not fit its receive: the ncclSend and "
                  "ncclRecv differ in count or datatype (%zu bytes expected, %s)",
                  m->from, comm->rank, m->expected, came);
    mpn_comm_set_async(comm, ncclInvalidUsage);
    return;
  }
  if (from >= 0)
    mpn_error_set(comm, ncclRemoteError, "rank %d aborted its communicator; abort this one too", from);
  else
    mpn_error_set(comm, ncclRemoteError, "a transfer with a peer over UCX failed (the peer is gone or unreachable)");
  mpn_comm_set_async(comm, ncclRemoteError);
}

/* How long an abort waits for its notices to reach the peers. */
enum { NOTICE_WAIT_MS = 1000 };

void mpn_ucx_abort(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  if (u == NULL || u->peers == NULL) return;
  /* Per peer: the notice's send, then a flush of the endpoint, whose
   * completion means the notice is there, before the close drops it. */
  uint64_t* done = calloc(2 * (size_t)comm->nranks, sizeof(uint64_t));
  int* failed = calloc((size_t)comm->nranks, sizeof(int));
  int posted = 0;
  for (int p = 0; done && failed && p < comm->nranks; p++) {
    if (p == comm->rank || u->peers[p].address == NULL) continue;
    mpn_ucx_cmd_t send = {.kind = MPN_UCX_SEND,
                          .owner = u,
                          .peer = &u->peers[p],
                          .buf = &u->rank,
                          .bytes = sizeof(u->rank),
                          .tag = notice_tag(comm, p),
                          .flag = &done[2 * p],
                          .value = 1,
                          .error = &failed[p],
                          .quiet = 1};
    mpn_ucx_cmd_t flush = {.kind = MPN_UCX_PUT_SIGNAL,
                           .owner = u,
                           .peer = &u->peers[p],
                           .flag = &done[2 * p + 1],
                           .value = 1,
                           .error = &failed[p],
                           .quiet = 1};
    if (mpn_ucx_proxy_post(&send) != ncclSuccess || mpn_ucx_proxy_post(&flush) != ncclSuccess) {
      posted = 0; /* out of memory: no waiting */
      break;
    }
    posted++;
  }
  uint64_t deadline = mpn_chan_now_ns() + NOTICE_WAIT_MS * 1000000ull;
  for (int p = 0; posted && p < comm->nranks; p++) {
    if (p == comm->rank || u->peers[p].address == NULL) continue;
    while (!__atomic_load_n(&done[2 * p + 1], __ATOMIC_ACQUIRE) && !__atomic_load_n(&failed[p], __ATOMIC_ACQUIRE) &&
           mpn_chan_now_ns() < deadline)
      usleep(50);
  }
  /* Cancels what is left (the notices too, if still in flight), which
   * writes their words: only then may they go. */
  mpn_ucx_proxy_close(u, u->peers, comm->nranks);
  free(done);
  free(failed);
}
