/*
 * net.c - per-communicator UCX state and tagged transfers of host memory.
 * Tags (see comm_tag below) carry the communicator (a 24-bit prefix that no
 * other live communicator of the process holds) and the sender, so messages
 * of different communicators and senders never match each other and those
 * of one pair match in order.  The host-memory tags do not carry the
 * receiver: two ranks of one process (one worker) receiving from one sender
 * on one communicator could take each other's messages; the staged tags of
 * device data carry it.
 *
 * The notices between ranks, and the communicator's abort and close, are
 * notices.c's; the state both share is net_impl.h's.
 */
#include "ucx/net.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "transport.h"
#include "ucx/net_impl.h"
#include "ucx/net_comm.h"
#include "ucx/prefix.h"
#include "ucx/proxy.h"
#include "ucx/winstage.h"

#define MPN_UCX_ADDR_MAX 4096

/* Tags: the communicator's 24-bit prefix, then either (bit 39 clear) 19 bits
 * of the source rank and 20 of a message number, or (bit 39 set, staged
 * device data, ucx/staged.c) 13 bits of the source, 13 of the destination
 * (more than 8192 ranks alias), 6 of the message and 7 of the chunk.  The
 * chunk field is a "last chunk of its message" bit (CHUNK_LAST) and a 6-bit
 * index that wraps modulo 63 (CHUNK_INDEXES); the field's value 127 (last
 * bit and index 63, which no chunk has) marks a message captured in a CUDA
 * graph (ucx/graph.c, numbered by the message field).  A chunk's receive
 * ignores the last bit in matching and compares it once matched (reports.c,
 * mpn_ucx_report_came): a sender that cut more or fewer chunks than the receiver,
 * every one full-size, is a size mismatch, not a chunk left for a later
 * message 64 further on, or one waited for forever.  A lane posts at most 32
 * receives at once (MPINCCL_UCX_DEPTH), whose tags differ without the last
 * bit too (fewer than either the message number or the index wraps at); a
 * sender may run ahead (eager sends complete locally) so equal tags can wait
 * together among the unexpected messages, and they still pair correctly
 * because UCX matches the messages of one endpoint in order and both sides
 * post in the same order.  The prefix is agreed on by all ranks when the
 * communicator is set up (prefix_agree) and is held by no other live
 * communicator in any of their processes, whose ranks share the process's
 * one worker: folded from the random key alone, two of k live communicators
 * met with a chance of about k^2 / 2^25 and could take each other's
 * messages. */
static uint64_t comm_tag(const struct ncclComm* comm) { return comm->ucx->key; }

/* Message numbers start at 1 and wrap past 0: number 0 is the notices'
 * (notice_tag, notices.c). */
static uint64_t make_tag(const struct ncclComm* comm, int src, uint64_t seq) {
  return comm_tag(comm) | ((uint64_t)src & 0x7ffff) << 20 | (1 + (seq - 1) % 0xfffff);
}

enum { CHUNK_FIELD = 0x7f, CHUNK_LAST = 0x40, CHUNK_INDEXES = 63, GRAPH_CHUNK = 0x7f };

static uint64_t staged_tag(const struct ncclComm* comm, int src, int dst, uint64_t msg, uint64_t chunk) {
  const uint64_t ranks = MPN_TRANSPORT_UCX_MAX_RANKS - 1; /* 13 bits: larger communicators are refused */
  return comm_tag(comm) | 1ull << 39 | ((uint64_t)src & ranks) << 26 | ((uint64_t)dst & ranks) << 13 |
         (msg & 0x3f) << 7 | chunk;
}

/* Indexes 0 to 62 (wrapping, which order-matching allows), so that no chunk
 * has the captured messages' field (mpn_ucx_graph_tag), last bit or not. */
uint64_t mpn_ucx_stage_tag(const struct ncclComm* comm, int src, int dst, uint64_t msg, uint64_t chunk, int last) {
  return staged_tag(comm, src, dst, msg, (last ? CHUNK_LAST : 0) | chunk % CHUNK_INDEXES);
}

uint64_t mpn_ucx_graph_tag(const struct ncclComm* comm, int src, int dst, uint64_t n) {
  return staged_tag(comm, src, dst, n, GRAPH_CHUNK);
}

/* The last bit of a staged chunk's tag; 0 for other tags (matched whole). */
static uint64_t last_bit_of(uint64_t tag) {
  return (tag >> 39 & 1) && (tag & CHUNK_FIELD) != GRAPH_CHUNK ? CHUNK_LAST : 0;
}

typedef struct {
  uint32_t len;
  char bytes[MPN_UCX_ADDR_MAX];
} addr_slot_t;

enum { PREFIX_ATTEMPTS = 64 };
/* A rank's answer in an attempt of prefix_agree; the worst one counts. */
enum { PREFIX_FREE, PREFIX_TAKEN, PREFIX_FAILED };

/* The first rank whose answer is worst in all (nranks); *worst is it. */
static int prefix_worst(const int* all, int nranks, int* worst) {
  int who = 0;
  for (int p = 1; p < nranks; p++)
    if (all[p] > all[who]) who = p;
  *worst = all[who];
  return who;
}

/*
 * Collective: a tag prefix that every rank could take in its process's
 * registry (held once by this rank on success).  Each attempt tries the
 * next candidate of the key; a rank whose process has it under another
 * key makes everyone let it go and try the next one.  Every rank joins
 * every allgather, even after a local failure, so nobody waits.
 */
static ncclResult_t prefix_agree(struct ncclComm* comm, uint32_t* out) {
  uint64_t key = comm->bootstrap->key;
  int* all = calloc((size_t)comm->nranks, sizeof(int));
  if (all == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < PREFIX_ATTEMPTS && res == ncclSuccess; i++) {
    uint32_t c = mpn_ucx_prefix_candidate(key, i);
    int taken = 0, worst = PREFIX_FAILED;
    ncclResult_t mine = mpn_ucx_prefix_reserve(c, key, &taken);
    int answer = mine != ncclSuccess ? PREFIX_FAILED : taken ? PREFIX_TAKEN : PREFIX_FREE;
    all[comm->rank] = answer;
    res = mpn_bootstrap_allgather(comm->bootstrap, all, sizeof(int));
    int who = res == ncclSuccess ? prefix_worst(all, comm->nranks, &worst) : comm->rank;
    if (worst == PREFIX_FREE) {
      free(all);
      *out = c;
      return ncclSuccess;
    }
    if (answer == PREFIX_FREE) mpn_ucx_prefix_release(c, key);
    if (res == ncclSuccess && worst == PREFIX_FAILED)
      res = answer == PREFIX_FAILED
                ? mine
                : mpn_error_set(comm, ncclRemoteError, "rank %d could not reserve a UCX tag prefix", who);
  }
  free(all);
  if (res == ncclSuccess)
    res = mpn_error_set(comm, ncclInternalError,
                        "UCX: no tag prefix was free in every process of the communicator after %d attempts "
                        "(rank %d of %d)",
                        PREFIX_ATTEMPTS, comm->rank, comm->nranks);
  return res;
}

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
  uint32_t prefix = 0;
  MPN_CHECK(prefix_agree(comm, &prefix));
  addr_slot_t* slots = calloc((size_t)comm->nranks, sizeof(*slots));
  struct mpn_ucx_comm* u = calloc(1, sizeof(*u));
  if (slots == NULL || u == NULL) {
    free(slots);
    free(u);
    mpn_ucx_prefix_release(prefix, comm->bootstrap->key);
    return mpn_error_set(comm, ncclSystemError, "out of memory");
  }
  comm->ucx = u;
  u->nranks = comm->nranks;
  u->rank = comm->rank;
  u->aborted_by = -1;
  u->failed_by = -1;
  u->unsent_by = -1;
  u->key = (uint64_t)prefix << (64 - MPN_UCX_PREFIX_BITS);
  u->holder = comm->bootstrap->key;
  u->mismatch.found = mpn_ucx_mismatch_found;
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
  if (res == ncclSuccess && any) res = mpn_ucx_notice_post(comm->ucx, 0);
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

mpn_ucx_failure_t* mpn_ucx_comm_failure(struct ncclComm* comm) { return &comm->ucx->failure; }

static ncclResult_t tagged_op(struct ncclComm* comm, mpn_ucx_cmd_kind_t kind, int peer, void* buf, size_t bytes,
                              uint64_t tag, const mpn_ucx_part_t* part, const mpn_ucx_trigger_t* when, uint64_t* flag,
                              uint64_t value, int* error, uint64_t* release, int nrelease) {
  struct mpn_ucx_comm* u = comm->ucx;
  mpn_ucx_cmd_t cmd = {.kind = kind,
                       .owner = u,
                       .peer = &u->peers[peer],
                       .buf = buf,
                       .bytes = bytes,
                       .tag = tag,
                       .last_bit = kind == MPN_UCX_RECV ? last_bit_of(tag) : 0,
                       .msg_offset = part ? part->offset : 0,
                       .msg_bytes = part ? part->total : 0,
                       .flag = flag,
                       .value = value,
                       .error = error,
                       .owner_error = &u->error,
                       .failure = &u->failure,
                       .trigger = when ? when->word : NULL,
                       .trigger_value = when ? when->value : 0,
                       .release = release,
                       .nrelease = nrelease,
                       .user_buffer = when ? when->user_buffer : 0,
                       .mismatch = &u->mismatch,
                       .closing = &u->closing,
                       .from = peer};
  ncclResult_t res = mpn_ucx_proxy_post(&cmd);
  /* (a send that never reached the proxy: its receiver must not wait for it) */
  if (res != ncclSuccess && kind == MPN_UCX_SEND) mpn_ucx_proxy_unsent(&cmd);
  return res;
}

static ncclResult_t host_op(struct ncclComm* comm, mpn_ucx_cmd_kind_t kind, int peer, void* buf,
                            size_t bytes, const mpn_ucx_trigger_t* when, uint64_t* flag,
                            uint64_t value, int* error) {
  struct mpn_ucx_comm* u = comm->ucx;
  if (mpn_ucx_comm_peer(comm, peer) == NULL)
    return mpn_error_set(comm, ncclInvalidUsage, "rank %d is not a UCX peer of rank %d", peer, comm->rank);
  uint64_t tag = kind == MPN_UCX_SEND ? make_tag(comm, comm->rank, ++u->send_seq[peer])
                                      : make_tag(comm, peer, ++u->recv_seq[peer]);
  return tagged_op(comm, kind, peer, buf, bytes, tag, NULL, when, flag, value, error, NULL, 0);
}

ncclResult_t mpn_ucx_tagged_on(struct ncclComm* comm, int send, int peer, void* buf, size_t bytes, uint64_t tag,
                               const mpn_ucx_part_t* part, const mpn_ucx_trigger_t* when, uint64_t* flag,
                               uint64_t value, int* error, uint64_t* release, int nrelease) {
  if (mpn_ucx_comm_peer(comm, peer) == NULL)
    return mpn_error_set(comm, ncclInvalidUsage, "rank %d is not a UCX peer of rank %d", peer, comm->rank);
  return tagged_op(comm, send ? MPN_UCX_SEND : MPN_UCX_RECV, peer, buf, bytes, tag, part, when, flag, value, error,
                   release, nrelease);
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

void mpn_ucx_peer_lost(struct ncclComm* comm, int peer) {
  mpn_ucx_peer_t* p = mpn_ucx_comm_peer(comm, peer);
  if (p && mpn_ucx_proxy_peer_lost(comm->ucx, p) != ncclSuccess)
    MPN_WARN("rank %d is gone, and its UCX operations could not be failed: out of memory", peer);
}

void mpn_ucx_peer_watch(struct ncclComm* comm, int peer) {
  mpn_ucx_peer_t* p = mpn_ucx_comm_peer(comm, peer);
  if (p && mpn_ucx_proxy_watch(comm->ucx, p) != ncclSuccess)
    MPN_INFO(MPN_SUBSYS_NET, "rank %d: no endpoint asked for rank %d: out of memory", comm->rank, peer);
}

int mpn_ucx_peer_unreachable(struct ncclComm* comm, int peer) {
  mpn_ucx_peer_t* p = mpn_ucx_comm_peer(comm, peer);
  /* (a peer whose abort notice came is reported so: mpn_ucx_poll_errors) */
  return p && __atomic_load_n(&p->unreachable, __ATOMIC_ACQUIRE) &&
         __atomic_load_n(&comm->ucx->aborted_by, __ATOMIC_ACQUIRE) != peer;
}

int mpn_ucx_peer_awaited(struct ncclComm* comm, int peer) {
  if (mpn_ucx_rma_waiting_for(comm, peer)) return 1;
  /* A captured wait for the peer's signal, or a captured put's wait for its
   * acknowledgement, waits on a word the peer writes, with no command of
   * this rank's posted: any captured one-sided call counts, as a pair does
   * over CUDA IPC (taken for idle, the peer was not released and such a
   * replay waited for good), unless the peer closed its communicator
   * cleanly (its notice came), as a pair's record of a normal end does. */
  mpn_ucx_peer_t* p = mpn_ucx_comm_peer(comm, peer);
  return mpn_ucx_rma_captured_with(comm, peer) && !(p && __atomic_load_n(&p->closed, __ATOMIC_ACQUIRE));
}

int mpn_ucx_peer_idle(struct ncclComm* comm, int peer) {
  mpn_ucx_peer_t* p = mpn_ucx_comm_peer(comm, peer);
  return !mpn_ucx_peer_awaited(comm, peer) && (p == NULL || !mpn_ucx_proxy_pending(p));
}

int mpn_ucx_peer_aborted(struct ncclComm* comm, int peer) {
  return comm->ucx && __atomic_load_n(&comm->ucx->aborted_by, __ATOMIC_ACQUIRE) == peer;
}

/* Reports a size mismatch, one of this rank's receives (preferred: its own
 * finding) or one of its sends (a peer's notice); 0 when neither is
 * recorded.  Records are written before their claimed flag (release). */
static int mismatch_report(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  int mine = __atomic_load_n(&u->mismatch.claimed, __ATOMIC_ACQUIRE);
  if (!mine && !__atomic_load_n(&u->told.claimed, __ATOMIC_ACQUIRE)) return 0;
  const mpn_ucx_mismatch_t* m = mine ? &u->mismatch : &u->told;
  char came[48], who[48] = "";
  if (m->came == MPN_UCX_CAME_BYTES)
    snprintf(came, sizeof(came), "%zu came", m->got);
  else
    snprintf(came, sizeof(came), "%s came", m->came == MPN_UCX_CAME_MORE ? "more" : "fewer");
  if (!mine) snprintf(who, sizeof(who), " (rank %d's report)", m->from);
  mpn_comm_fail_async(comm, ncclInvalidUsage,
                      "a message from rank %d to rank %d over UCX does not fit its receive%s: the ncclSend and "
                      "ncclRecv differ in count or datatype (%zu bytes expected, %s)",
                      mine ? m->from : comm->rank, mine ? comm->rank : m->from, who, m->expected, came);
  return 1;
}

/* Whether a UCX status tells of the peer (gone, unreachable; or a transfer
 * cancelled for that) rather than of this rank's side. */
static int status_of_peer(ucs_status_t status) {
  switch (status) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_CANCELED: return 1;
    default: return 0;
  }
}

/* Whether the proxy told the communicator's first failed transfer, and
 * gave it code. */
static int failure_told(const struct mpn_ucx_comm* u, ncclResult_t code) {
  return __atomic_load_n(&u->failure.ready, __ATOMIC_ACQUIRE) && u->failure.code == (int)code;
}

/* The communicator's first failed transfer, as the proxy told it, then
 * after (may be ""): into text (size bytes). */
static void failure_text(const struct mpn_ucx_comm* u, const char* after, char* text, size_t size) {
  const mpn_ucx_failure_t* f = &u->failure;
  if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE)) {
    snprintf(text, size, "a transfer with a peer over UCX failed (the peer is gone or unreachable)%s", after);
    return;
  }
  ucs_status_t status = (ucs_status_t)f->status;
  snprintf(text, size, "a UCX %s with rank %d failed: %s (%s)%s", mpn_ucx_cmd_kind_name(f->kind), f->peer,
           ucs_status_string(status),
           status_of_peer(status) ? "the peer is gone or unreachable" : "on this rank's side", after);
}

/* The communicator's first error decides the code and the text: a size
 * mismatch found after this rank failed on its own (its receive's message
 * then taken by a later receive) is not reported over it, nor is a peer's
 * abort that came after it (only mentioned).  A peer's abort after a
 * failed transfer (ncclRemoteError, as the abort's) is reported as the
 * abort: its notice fails the transfers with that peer, and says why.
 * (An earlier failure of the communicator outside UCX stays its
 * asynchronous error: mpn_comm_set_broken.) */
void mpn_ucx_poll_errors(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  int error = u ? __atomic_load_n(&u->error, __ATOMIC_ACQUIRE) : ncclSuccess;
  /* Once, whichever API thread polls first (ncclCommGetAsyncError may be
   * called from several at once). */
  if (u == NULL || error == ncclSuccess || __atomic_exchange_n(&u->reported, 1, __ATOMIC_ACQ_REL)) return;
  int from = __atomic_load_n(&u->aborted_by, __ATOMIC_ACQUIRE);
  int failed_by = __atomic_load_n(&u->failed_by, __ATOMIC_ACQUIRE);
  int unsent_by = __atomic_load_n(&u->unsent_by, __ATOMIC_ACQUIRE);
  if (error == ncclInvalidUsage && mismatch_report(comm)) return;
  ncclResult_t code = error == ncclInvalidUsage ? ncclRemoteError : (ncclResult_t)error;
  char after[64] = "", text[512];
  if (from >= 0 && code != ncclRemoteError)
    snprintf(after, sizeof(after), "; rank %d aborted its communicator since", from);
  if (from >= 0 && code == ncclRemoteError) {
    snprintf(text, sizeof(text), "rank %d aborted its communicator; abort this one too", from);
  } else if (failed_by >= 0 && code == ncclRemoteError) {
    snprintf(text, sizeof(text),
             "rank %d failed on its own (a UCX receive of this rank's message could not be posted there: "
             "out of memory) and takes no more of this rank's messages; abort this communicator",
             failed_by);
  } else if (unsent_by >= 0 && code == ncclRemoteError) {
    snprintf(text, sizeof(text),
             "rank %d failed on its own: its UCX send of a message of %llu bytes (tag %#llx) to rank %d could "
             "not be made there (out of memory); that message's receive and every later receive from rank %d "
             "fail; abort this communicator",
             unsent_by, (unsigned long long)u->unsent_bytes, (unsigned long long)u->unsent_tag, comm->rank, unsent_by);
  } else if (code != ncclRemoteError && !failure_told(u, code)) {
    /* this rank's own, off the proxy (a copy CUDA refused, out of memory: staged.c) */
    snprintf(text, sizeof(text),
             "a transfer over UCX could not be issued on this rank: %s (see the warning logged then)%s",
             ncclGetErrorString(code), after);
  } else {
    failure_text(u, after, text, sizeof(text));
  }
  mpn_comm_set_broken(comm, code, "%s", text);
}
