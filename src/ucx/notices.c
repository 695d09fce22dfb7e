/*
 * notices.c - the notices between a communicator's UCX ranks (abort, size
 * mismatch, failure, clean close): their receive and handling, and the
 * communicator's ends that send them and wait for them (abort, destroy).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "ucx/net.h"
#include "ucx/net_impl.h"
#include "ucx/prefix.h"
#include "ucx/proxy.h"

/* A notice (notice_t) to rank dst: addressed by the receiver (ranks of one
 * process share a worker), the sender in the data; key is comm_tag's (net.c). */
static uint64_t notice_tag(uint64_t key, int dst) { return key | ((uint64_t)dst & 0x7ffff) << 20; }

/* The notice receive, posted again for the next notice (after a clean
 * close's, or one dropped), unless the communicator is closing: its close
 * cancels the receive, and one posted after it would fill freed memory. */
static void notice_again(struct mpn_ucx_comm* u) {
  if (!__atomic_load_n(&u->closing, __ATOMIC_ACQUIRE) && mpn_ucx_notice_post(u, 1) != ncclSuccess)
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
void mpn_ucx_mismatch_found(mpn_ucx_mismatch_t* m) {
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
ncclResult_t mpn_ucx_notice_post(struct mpn_ucx_comm* u, int again) {
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
 * tells the sender (mpn_ucx_mismatch_found, on the proxy thread) to have arrived,
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
