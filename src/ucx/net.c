/*
 * net.c - per-communicator UCX state and tagged transfers of host memory.
 * Tags (see comm_tag below) carry the communicator (a 24-bit prefix that no
 * other live communicator of the process holds) and the sender, so messages
 * of different communicators and senders never match each other and those
 * of one pair match in order.  The host-memory tags do not carry the
 * receiver: two ranks of one process (one worker) receiving from one sender
 * on one communicator could take each other's messages; the staged tags of
 * device data carry it.
 */
#include "ucx/net.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "transport.h"
#include "ucx/net_comm.h"
#include "ucx/prefix.h"
#include "ucx/proxy.h"
#include "ucx/winstage.h"

#define MPN_UCX_ADDR_MAX 4096

/* A notice between the ranks of a communicator (notice_tag): a rank
 * aborted, or a receive found that the message sent to it has another size
 * (the sender learns of it so; ucx/reports.c, mpn_ucx_report_came), or a rank closed
 * its communicator cleanly (its endpoints fail next, which is then no
 * crash), or a receive of the sender's message failed on the receiving
 * rank (out of memory: the message is never taken; reports.c,
 * failed_here_note), or a send of the notice's sender to the rank it
 * tells failed on the sending rank (out of memory: the message never
 * comes).  Fits a proxy send's inline payload (mpn_ucx_proxy_send_here). */
enum { NOTICE_ABORT = 1, NOTICE_MISMATCH = 2, NOTICE_CLOSED = 3, NOTICE_FAILED = 4, NOTICE_UNSENT = 5 };

typedef struct {
  int32_t from; /* the rank that sends it */
  int32_t kind; /* NOTICE_* */
  int32_t came; /* mismatch: an mpn_ucx_came_t */
  int32_t unused;
  /* mismatch: as in mpn_ucx_mismatch_t; unsent: the message's bytes, and
   * the tag of its send that failed */
  uint64_t expected, got;
} notice_t;

_Static_assert(sizeof(notice_t) <= sizeof(((mpn_ucx_cmd_t*)0)->desc_bytes), "a notice is sent inline");

struct mpn_ucx_comm {
  mpn_ucx_peer_t* peers;  /* nranks; address NULL for peers not on UCX */
  uint64_t *send_seq, *recv_seq;
  int nranks, rank;
  uint64_t key;           /* comm_tag of the communicator */
  uint64_t holder;        /* the bootstrap key that holds key's prefix in this process (prefix_agree) */
  int error;              /* an ncclResult_t set by the proxy when a transfer fails */
  mpn_ucx_failure_t failure; /* the first transfer that failed */
  int reported;           /* error already folded into the async error */
  notice_t notice_in;     /* the notice receive's payload */
  notice_t notice_out;    /* what an abort sends */
  int aborted_by;         /* the rank whose abort notice came, else -1 */
  int failed_by;          /* the rank whose notice that it failed on its own came, else -1 */
  int unsent_by;          /* the rank whose notice that its send to this rank failed came, else -1 */
  uint64_t unsent_bytes, unsent_tag; /* that send's message (written before unsent_by) */
  uint64_t notice_done;   /* the notice receive's flag */
  int closed;                  /* mpn_ucx_abort closed the endpoints */
  int closing;                 /* a close or an abort began: the notice receive is not posted again */
  mpn_ucx_mismatch_t mismatch; /* the first receive of another size than its message */
  mpn_ucx_mismatch_t told;     /* a peer's mismatch notice: a send of this rank did not fit */
};

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
 * (notice_tag). */
static uint64_t make_tag(const struct ncclComm* comm, int src, uint64_t seq) {
  return comm_tag(comm) | ((uint64_t)src & 0x7ffff) << 20 | (1 + (seq - 1) % 0xfffff);
}

/* A notice (notice_t) to rank dst: addressed by the receiver (ranks of one
 * process share a worker), the sender in the data; key is comm_tag's. */
static uint64_t notice_tag(uint64_t key, int dst) { return key | ((uint64_t)dst & 0x7ffff) << 20; }

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

static ncclResult_t notice_post(struct mpn_ucx_comm* u, int again);

/* The notice receive, posted again for the next notice (after a clean
 * close's, or one dropped), unless the communicator is closing: its close
 * cancels the receive, and one posted after it would fill freed memory. */
static void notice_again(struct mpn_ucx_comm* u) {
  if (!__atomic_load_n(&u->closing, __ATOMIC_ACQUIRE) && notice_post(u, 1) != ncclSuccess)
    MPN_WARN("UCX: rank %d takes no more notices of its peers: out of memory", u->rank);
}

/* What makes a notice that came unusable, in words; NULL: nothing. */
static const char* notice_fault(const struct mpn_ucx_comm* u, const notice_t* n) {
  if (n->from < 0 || n->from >= u->nranks || u->peers[n->from].address == NULL) return "that rank is no UCX peer of it";
  if (n->kind < NOTICE_ABORT || n->kind > NOTICE_UNSENT) return "its kind is unknown";
  if (n->kind == NOTICE_MISMATCH && (n->came < MPN_UCX_CAME_BYTES || n->came > MPN_UCX_CAME_FEWER))
    return "its report of what came is unknown";
  return NULL;
}

/* On the proxy thread, inside UCX's callback: a message of another size
 * than a notice came on the notice tag.  It is dropped and the next notice
 * taken: a peer's abort that follows must still be heard.  A short one
 * names its sender when it holds that field; UCX writes nothing of a
 * longer one, which it truncates. */
static void notice_misfit(void* arg, mpn_ucx_came_t came, size_t got) {
  struct mpn_ucx_comm* u = arg;
  char sender[64] = "an unknown rank", size[48] = "a longer message came";
  if (came == MPN_UCX_CAME_BYTES) snprintf(size, sizeof(size), "%zu bytes came", got);
  if (came == MPN_UCX_CAME_BYTES && got >= sizeof(u->notice_in.from))
    snprintf(sender, sizeof(sender), "rank %d (as the notice says)", (int)u->notice_in.from);
  MPN_WARN("UCX: rank %d drops a notice from %s: %s, a notice has %zu bytes; it takes the next one", u->rank, sender,
           size, sizeof(notice_t));
  notice_again(u);
}

/* What a notice that fails the communicator says, for its report
 * (mpn_ucx_poll_errors), each published by the release of its last word. */
static void notice_record(struct mpn_ucx_comm* u, const notice_t* n) {
  if (n->kind == NOTICE_MISMATCH) {
    u->told.from = n->from;
    u->told.expected = (size_t)n->expected;
    u->told.got = (size_t)n->got;
    u->told.came = (mpn_ucx_came_t)n->came;
    __atomic_store_n(&u->told.claimed, 1, __ATOMIC_RELEASE);
  } else if (n->kind == NOTICE_UNSENT) {
    u->unsent_bytes = n->expected;
    u->unsent_tag = n->got;
    __atomic_store_n(&u->unsent_by, n->from, __ATOMIC_RELEASE);
  } else {
    __atomic_store_n(n->kind == NOTICE_FAILED ? &u->failed_by : &u->aborted_by, n->from, __ATOMIC_RELEASE);
  }
}

/* On the proxy thread, once a peer's notice came: everything with that
 * peer fails (its streams' waits are released), and the communicator
 * reports it (mpn_ucx_poll_errors): ncclRemoteError for an abort or a
 * failure of the peer's own (a receive or a send of it that failed
 * there), ncclInvalidUsage for a send of this rank that did not fit its
 * receive.  After a mismatch or a failure the peer takes no more of this
 * rank's messages, so the sends to it in flight, which UCX cannot cancel,
 * are released too.  A
 * malformed notice is dropped, as one of another size (notice_misfit). */
static void notice_arrived(void* arg) {
  struct mpn_ucx_comm* u = arg;
  const notice_t* n = &u->notice_in;
  int from = n->from, mismatch = n->kind == NOTICE_MISMATCH;
  int failed = n->kind == NOTICE_FAILED || n->kind == NOTICE_UNSENT;
  const char* fault = notice_fault(u, n);
  if (fault) {
    MPN_WARN("UCX: rank %d drops a notice from rank %d (kind %d, report %d): %s; it takes the next one", u->rank, from,
             n->kind, n->came, fault);
    notice_again(u);
    return;
  }
  if (n->kind == NOTICE_CLOSED) { /* no failure: the next notice is taken too */
    __atomic_store_n(&u->peers[from].closed, 1, __ATOMIC_RELEASE);
    notice_again(u);
    return;
  }
  notice_record(u, n);
  int ok = ncclSuccess;
  __atomic_compare_exchange_n(&u->error, &ok, (int)(mismatch ? ncclInvalidUsage : ncclRemoteError), 0, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
  u->peers[from].notified = 1; /* (its messages still queued are not taken) */
  mpn_ucx_proxy_fail_peer(&u->peers[from]);
  if (mismatch || failed) mpn_ucx_proxy_release_sends(&u->peers[from]);
}

/*
 * On the proxy thread, outside UCX's callbacks, once a receive of this
 * communicator found a message of another size (u->mismatch, or the
 * peer's record), or a receive or a send of it failed on this rank
 * (failed_here, failed_send): the peer gets a notice, then this side's
 * operations with it end, as the peer's do when the notice comes
 * (notice_arrived).  Failing the peer cancels this
 * rank's receives from it still posted (the rest of the message's chunks,
 * later messages of the lane) and makes those armed fail instead of being
 * posted: no receive of the failed communicator takes another message's
 * chunk (the sender's extra chunks stay in UCX's queue of unexpected
 * messages), and each failure releases its pipeline's words, so that the
 * stream's waits pass.  Only the receives are cancelled: the notice may
 * still wait for its endpoint's wire-up, and sends are released instead,
 * before the notice starts (released, its flag would be written at once).
 * The notice and a flush of its endpoint start before the peer fails (a
 * failed peer gets nothing); a close waits for the flush (notice_wait).
 */
static void mismatch_found(mpn_ucx_mismatch_t* m) {
  struct mpn_ucx_comm* u = (struct mpn_ucx_comm*)m->owner; /* (the failed operation's owner: this state) */
  mpn_ucx_peer_t* peer = &u->peers[m->from];
  int failed = __atomic_load_n(&m->failed_here, __ATOMIC_ACQUIRE);
  notice_t n = {.from = u->rank,
                .kind = !failed          ? NOTICE_MISMATCH
                        : m->failed_send ? NOTICE_UNSENT
                                         : NOTICE_FAILED,
                .came = (int32_t)m->came,
                .expected = m->expected,
                .got = failed && m->failed_send ? m->tag : m->got};
  mpn_ucx_cmd_t cmd = {
      .owner = u, .peer = peer, .tag = notice_tag(u->key, m->from), .flag = &peer->notice_sent, .value = 1, .quiet = 1};
  mpn_ucx_proxy_release_sends(peer);
  ncclResult_t res = mpn_ucx_proxy_send_here(&cmd, &n, sizeof(n));
  cmd.flag = &peer->notice_flushed;
  if (res == ncclSuccess) res = mpn_ucx_proxy_flush_here(&cmd);
  if (res != ncclSuccess) {
    MPN_WARN("UCX: rank %d could not tell rank %d that %s: %s", u->rank, m->from,
             !failed          ? "its message did not fit"
             : m->failed_send ? "its message will not come"
                              : "it failed on its own",
             ncclGetLastError(NULL));
    /* Nothing for a close to wait for (a notice that went without its flush is let go too). */
    __atomic_store_n(&peer->notice_sent, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&peer->notice_flushed, 1, __ATOMIC_RELEASE);
  }
  mpn_ucx_proxy_fail_peer_receives(peer);
}

/* Posts the receive of the peers' notices: an abort's or a mismatch's
 * ends the communicator; after a clean close's or a dropped one (malformed,
 * or of another size) notice_arrived or notice_misfit, on the proxy thread
 * inside UCX's callback, posts it again (again: 1).
 * It is cancelled, quietly, when the communicator closes. */
static ncclResult_t notice_post(struct mpn_ucx_comm* u, int again) {
  mpn_ucx_cmd_t cmd = {.kind = MPN_UCX_RECV,
                       .owner = u,
                       .buf = &u->notice_in,
                       .bytes = sizeof(u->notice_in),
                       .tag = notice_tag(u->key, u->rank),
                       .flag = &u->notice_done,
                       .value = 1,
                       .fn = notice_arrived,
                       .misfit = notice_misfit,
                       .arg = u,
                       .quiet = 1};
  return again ? mpn_ucx_proxy_post_later(&cmd) : mpn_ucx_proxy_post(&cmd);
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
  u->mismatch.found = mismatch_found;
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
  if (res == ncclSuccess && any) res = notice_post(comm->ucx, 0);
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

/* How long a close waits for its notices (an abort's, a mismatch's) to
 * reach the peers. */
enum { NOTICE_WAIT_MS = 1000 };

/*
 * A close's wait for a flag that the proxy thread writes: until *flag is
 * set, or *error (NULL: none) is, or the clock passes deadline; returns
 * whether the flag is set.  The proxy alone progresses the worker, so the
 * caller (an API thread, holding no lock the proxy takes) only sleeps; on
 * the proxy thread it would wait the deadline out.
 */
static int flag_wait(const uint64_t* flag, const int* error, uint64_t deadline) {
  while (!__atomic_load_n(flag, __ATOMIC_ACQUIRE) && !(error && __atomic_load_n(error, __ATOMIC_ACQUIRE)) &&
         mpn_clock_now_ns() < deadline)
    usleep(50);
  return __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

/*
 * Before a close, which cancels what is in flight: when a receive of u
 * found a size mismatch, waits until the deadline for the notice that
 * tells the sender (mismatch_found, on the proxy thread) to have arrived,
 * its endpoint's flush being done.  It may still wait for the endpoint's
 * wire-up (an endpoint first made by that receive), and dropped, it would
 * leave the sender without the reason, waiting or failing otherwise.
 * Without a mismatch it returns at once.  The record is claimed before the
 * failure shows (release); the proxy runs the hook before it serves a
 * close, so a claimed record always gets its notice and flags.
 */
static void notice_wait(struct mpn_ucx_comm* u, uint64_t deadline) {
  /* Both, one after the other: each is written once, never undone. */
  for (int p = 0; p < u->nranks; p++) {
    mpn_ucx_peer_t* peer = &u->peers[p];
    if (__atomic_load_n(&peer->mismatch_due, __ATOMIC_ACQUIRE) && flag_wait(&peer->notice_sent, NULL, deadline))
      flag_wait(&peer->notice_flushed, NULL, deadline);
  }
}

/* The endpoints a clean destroy flushes (flush_start); the words stay
 * until the close, which redirects the flushes still in flight. */
typedef struct {
  struct mpn_ucx_comm* u;
  uint64_t* done; /* per peer: its flush's flag, written whatever its status; 1 at once without a flush */
} flush_set_t;

/* On the proxy thread (mpn_ucx_proxy_call): to every endpoint of the
 * communicator that was opened and has not failed, the notice of a clean
 * close (a peer that waits in a CUDA graph for this rank's signals then
 * takes the endpoint's failure that follows for an end: core/watchdog.c),
 * then a flush, which it follows; peers it never used get neither
 * (nothing to flush, and no endpoint made for them). */
static void flush_start(void* arg) {
  static uint64_t closed_sent; /* nobody waits for it: the flush follows it */
  flush_set_t* f = arg;
  struct mpn_ucx_comm* u = f->u;
  notice_t n = {.from = u->rank, .kind = NOTICE_CLOSED};
  for (int p = 0; p < u->nranks; p++) {
    mpn_ucx_peer_t* peer = &u->peers[p];
    mpn_ucx_cmd_t cmd = {.owner = u, .peer = peer, .flag = &f->done[p], .value = 1, .quiet = 1};
    if (peer->address == NULL || peer->ep == NULL || peer->failed) {
      __atomic_store_n(&f->done[p], 1, __ATOMIC_RELEASE);
      continue;
    }
    mpn_ucx_cmd_t notice = {
        .owner = u, .peer = peer, .tag = notice_tag(u->key, p), .flag = &closed_sent, .value = 1, .quiet = 1};
    if (p != u->rank && mpn_ucx_proxy_send_here(&notice, &n, sizeof(n)) != ncclSuccess)
      MPN_INFO(MPN_SUBSYS_NET, "rank %d: no close notice to rank %d: out of memory", u->rank, p);
    if (mpn_ucx_proxy_flush_here(&cmd) != ncclSuccess) __atomic_store_n(&f->done[p], 1, __ATOMIC_RELEASE);
  }
}

/*
 * A destroy (not an abort) of a communicator that has not failed: before
 * the forced close, which drops what UCX still holds, waits until every
 * endpoint it opened is flushed, so that sends UCX completed locally (eager
 * data still queued, on an endpoint whose wire-up waits for the peer, say)
 * have arrived.  Bounded by MPINCCL_NET_TIMEOUT, not a second as the
 * notices: this is the program's data to a peer that is alive and may
 * only be slow to answer (a loaded host stops processes for seconds), and
 * a peer gone fails its endpoint by keepalive within about that time,
 * which ends the flush.  Returns the words (NULL: none), freed after the
 * close.
 */
static flush_set_t* flush_before_close(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  size_t n = (size_t)comm->nranks;
  /* A rank without a UCX peer of its own (the others use UCX between
   * them) has nothing to flush, and its process may have no proxy thread
   * to ask: the call would wait MPINCCL_BOOTSTRAP_TIMEOUT, then fail. */
  int any = 0;
  for (size_t p = 0; p < n; p++) any |= u->peers[p].address != NULL;
  if (!any) return NULL;
  flush_set_t* f = calloc(1, sizeof(*f));
  if (f) *f = (flush_set_t){.u = u, .done = calloc(n, sizeof(uint64_t))};
  if (f == NULL || f->done == NULL || mpn_ucx_proxy_call(flush_start, f) != ncclSuccess) {
    MPN_WARN("UCX: rank %d closes its endpoints without a flush: its last sends may not arrive", u->rank);
    return f;
  }
  uint64_t timeout = (uint64_t)mpn_param_int(MPN_PARAM_NET_TIMEOUT);
  uint64_t deadline = mpn_clock_now_ns() + timeout * 1000000000ull;
  for (int p = 0; p < comm->nranks; p++) {
    if (!flag_wait(&f->done[p], NULL, deadline))
      MPN_WARN(
          "UCX: rank %d's last sends to rank %d may not have arrived: its endpoint's flush did not end "
          "within MPINCCL_NET_TIMEOUT (%llu s)",
          u->rank, p, (unsigned long long)timeout);
  }
  return f;
}

static void flush_set_free(flush_set_t* f) {
  if (f == NULL) return;
  free(f->done);
  free(f);
}

void mpn_ucx_comm_free(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  if (u == NULL) return;
  __atomic_store_n(&u->closing, 1, __ATOMIC_RELEASE);
  if (u->peers) {
    /* After an abort the flags may be the proxy's own (drain_owner): its
     * close waited already. */
    if (!u->closed) notice_wait(u, mpn_clock_now_ns() + NOTICE_WAIT_MS * 1000000ull);
    int failed = __atomic_load_n(&u->error, __ATOMIC_ACQUIRE) != ncclSuccess;
    flush_set_t* flushes = !u->closed && comm->ucx_clean && !failed ? flush_before_close(comm) : NULL;
    mpn_ucx_proxy_close(u, u->peers, comm->nranks);
    flush_set_free(flushes);
    for (int p = 0; p < comm->nranks; p++) free(u->peers[p].address);
  }
  /* After the close: no receive of comm is still posted under the prefix. */
  mpn_ucx_prefix_release((uint32_t)(u->key >> (64 - MPN_UCX_PREFIX_BITS)), u->holder);
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
  mpn_error_set(comm, ncclInvalidUsage,
                "a message from rank %d to rank %d over UCX does not fit its receive%s: the ncclSend and "
                "ncclRecv differ in count or datatype (%zu bytes expected, %s)",
                mine ? m->from : comm->rank, mine ? comm->rank : m->from, who, m->expected, came);
  mpn_comm_set_async(comm, ncclInvalidUsage);
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

/* The communicator's first failed transfer, as the proxy told it, with
 * code (ncclRemoteError, or ncclSystemError where UCX could not allocate
 * on this rank: reports.c, failure_code); then after (may be ""). */
static void failure_report(struct ncclComm* comm, const struct mpn_ucx_comm* u, ncclResult_t code, const char* after) {
  const mpn_ucx_failure_t* f = &u->failure;
  if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE)) {
    mpn_error_set(comm, code, "a transfer with a peer over UCX failed (the peer is gone or unreachable)%s", after);
    return;
  }
  ucs_status_t status = (ucs_status_t)f->status;
  mpn_error_set(comm, code, "a UCX %s with rank %d failed: %s (%s)%s", mpn_ucx_cmd_kind_name(f->kind), f->peer,
                ucs_status_string(status),
                status_of_peer(status) ? "the peer is gone or unreachable" : "on this rank's side", after);
}

/* The communicator's first error decides the code and the text: a size
 * mismatch found after this rank failed on its own (its receive's message
 * then taken by a later receive) is not reported over it, nor is a peer's
 * abort that came after it (only mentioned).  A peer's abort after a
 * failed transfer (ncclRemoteError, as the abort's) is reported as the
 * abort: its notice fails the transfers with that peer, and says why. */
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
  char after[64] = "";
  if (from >= 0 && code != ncclRemoteError)
    snprintf(after, sizeof(after), "; rank %d aborted its communicator since", from);
  if (from >= 0 && code == ncclRemoteError) {
    mpn_error_set(comm, code, "rank %d aborted its communicator; abort this one too", from);
  } else if (failed_by >= 0 && code == ncclRemoteError) {
    mpn_error_set(comm, code,
                  "rank %d failed on its own (a UCX receive of this rank's message could not be posted there: "
                  "out of memory) and takes no more of this rank's messages; abort this communicator",
                  failed_by);
  } else if (unsent_by >= 0 && code == ncclRemoteError) {
    mpn_error_set(comm, code,
                  "rank %d failed on its own: its UCX send of a message of %llu bytes (tag %#llx) to rank %d could "
                  "not be made there (out of memory); that message's receive and every later receive from rank %d "
                  "fail; abort this communicator",
                  unsent_by, (unsigned long long)u->unsent_bytes, (unsigned long long)u->unsent_tag, comm->rank,
                  unsent_by);
  } else if (code != ncclRemoteError && !failure_told(u, code)) {
    /* this rank's own, off the proxy (a copy CUDA refused, out of memory: staged.c) */
    mpn_error_set(comm, code,
                  "a transfer over UCX could not be issued on this rank: %s (see the warning logged then)%s",
                  ncclGetErrorString(code), after);
  } else {
    failure_report(comm, u, code, after);
  }
  mpn_comm_set_broken(comm, code);
}

void mpn_ucx_abort(struct ncclComm* comm) {
  struct mpn_ucx_comm* u = comm->ucx;
  if (u == NULL || u->peers == NULL) return;
  __atomic_store_n(&u->closing, 1, __ATOMIC_RELEASE);
  /* Per peer: the notice's send, then a flush of the endpoint, whose
   * completion means the notice is there, before the close drops it. */
  u->notice_out = (notice_t){.from = u->rank, .kind = NOTICE_ABORT};
  uint64_t* done = calloc(2 * (size_t)comm->nranks, sizeof(uint64_t));
  int* failed = calloc((size_t)comm->nranks, sizeof(int));
  int posted = 0;
  for (int p = 0; done && failed && p < comm->nranks; p++) {
    if (p == comm->rank || u->peers[p].address == NULL) continue;
    mpn_ucx_cmd_t send = {.kind = MPN_UCX_SEND,
                          .owner = u,
                          .peer = &u->peers[p],
                          .buf = &u->notice_out,
                          .bytes = sizeof(u->notice_out),
                          .tag = notice_tag(u->key, p),
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
  uint64_t deadline = mpn_clock_now_ns() + NOTICE_WAIT_MS * 1000000ull;
  for (int p = 0; posted && p < comm->nranks; p++)
    if (p != comm->rank && u->peers[p].address != NULL) flag_wait(&done[2 * p + 1], &failed[p], deadline);
  /* A mismatch notice sent before goes to a failed peer, whom the abort's
   * notice does not reach: it is waited for on its own. */
  notice_wait(u, deadline);
  /* Cancels what is left (the notices too, if still in flight), which
   * writes their words: only then may they go. */
  mpn_ucx_proxy_close(u, u->peers, comm->nranks);
  u->closed = 1;
  free(done);
  free(failed);
}
