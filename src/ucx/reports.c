/*
 * reports.c - what the proxy thread makes of an operation that failed or
 * met a message of another size: its error words, the communicator's first
 * failure, and how the peer is told (reports whose hooks are notices.c's, or
 * the mark of a put's lost data that its signal carries).
 */
#include "ucx/reports.h"

#include <pthread.h>
#include <string.h>

#include "core/error.h"

/* The records whose hook is due. */
static struct {
  mpn_ucx_mismatch_t* found; /* claimed records whose found is due, proxy thread only */
  /* Records made due by other threads (mpn_ucx_proxy_unsent), under
   * posted_lock: a push and the drop of a closing owner's records are
   * ordered by it (the proxy takes it only when the list is not empty, or
   * for a close). */
  mpn_ucx_mismatch_t* found_posted;
  pthread_mutex_t posted_lock;
} rp = {.posted_lock = PTHREAD_MUTEX_INITIALIZER};

const char* mpn_ucx_cmd_kind_name(mpn_ucx_cmd_kind_t kind) {
  switch (kind) {
    case MPN_UCX_SEND: return "send";
    case MPN_UCX_RECV: return "receive";
    case MPN_UCX_PUT_SIGNAL: return "put with signal";
    default: return "call";
  }
}

/* The ncclResult_t of a command that failed with status.  A receive of
 * another size than its message is the caller's error (the matching send
 * differs in count or datatype), as within a host; an allocation UCX could
 * not make on this rank (a request, an endpoint) is this rank's own. */
static int failure_code(const mpn_ucx_cmd_t* cmd, ucs_status_t status) {
  if (status == UCS_ERR_MESSAGE_TRUNCATED && cmd->mismatch) return ncclInvalidUsage;
  return status == UCS_ERR_NO_MEMORY ? ncclSystemError : ncclRemoteError;
}

static void failed_here_note(const mpn_ucx_cmd_t* cmd);

void mpn_ucx_report_failure(mpn_ucx_cmd_t* cmd, ucs_status_t status) {
  int code = failure_code(cmd, status);
  if (cmd->error) __atomic_store_n(cmd->error, code, __ATOMIC_RELEASE);
  mpn_ucx_failure_t* f = cmd->failure; /* (before the owner's word, which its reader checks first) */
  if (f && !__atomic_exchange_n(&f->taken, 1, __ATOMIC_ACQ_REL)) {
    f->status = (int)status;
    f->code = code;
    f->kind = cmd->kind;
    f->peer = cmd->from;
    __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
  }
  int ok = ncclSuccess; /* the communicator keeps its first error */
  if (cmd->owner_error) __atomic_compare_exchange_n(cmd->owner_error, &ok, code, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
  if (code == ncclSystemError) failed_here_note(cmd);
  if (!cmd->quiet) MPN_WARN("UCX %s failed: %s", mpn_ucx_cmd_kind_name(cmd->kind), ucs_status_string(status));
}

int mpn_ucx_report_came(const mpn_ucx_cmd_t* cmd, ucs_status_t status, const ucp_tag_recv_info_t* info,
                        mpn_ucx_came_t* came, size_t* got) {
  if (status == UCS_ERR_MESSAGE_TRUNCATED) { /* what UCX says of a longer one's length is not relied on */
    *came = MPN_UCX_CAME_MORE;
    return 1;
  }
  if (status != UCS_OK || info == NULL) return 0;
  int ended = cmd->last_bit == 0 || (info->sender_tag & cmd->last_bit) != 0;
  int mine_ends = cmd->last_bit == 0 || (cmd->tag & cmd->last_bit) != 0;
  if (info->length == cmd->bytes && ended == mine_ends) return 0;
  if (info->length == cmd->bytes && !ended) {
    *came = MPN_UCX_CAME_MORE;
  } else if (ended) {
    *came = MPN_UCX_CAME_BYTES;
    *got = cmd->msg_offset + info->length;
  } else {
    *came = MPN_UCX_CAME_FEWER; /* a short chunk that is not the sender's last: smaller chunks */
  }
  return 1;
}

/* Claims peer's record for its report, from any thread: 1 for the first
 * claimer only (a peer is told once). */
static int report_claim(mpn_ucx_peer_t* peer) { return !__atomic_exchange_n(&peer->mismatch_due, 1, __ATOMIC_ACQ_REL); }

/* Writes into the record r what it says of cmd's peer. */
static void report_fill(const mpn_ucx_cmd_t* cmd, mpn_ucx_mismatch_t* r, mpn_ucx_came_t came, size_t got) {
  r->found = cmd->mismatch->found;
  r->from = cmd->from;
  r->expected = cmd->msg_bytes ? cmd->msg_bytes : cmd->bytes;
  r->got = got;
  r->came = came;
  r->owner = cmd->owner;
  r->tag = cmd->tag;
}

/* The record r (the communicator's, or the peer's own) describes cmd's
 * peer and is due: its hook runs from the proxy's loop, not from inside
 * UCX.  Published by the release of claimed, then of the error. */
static void report_due(const mpn_ucx_cmd_t* cmd, mpn_ucx_mismatch_t* r, mpn_ucx_came_t came, size_t got) {
  if (cmd->peer) __atomic_store_n(&cmd->peer->mismatch_due, 1, __ATOMIC_RELEASE);
  report_fill(cmd, r, came, got);
  if (r == cmd->mismatch) __atomic_store_n(&r->claimed, 1, __ATOMIC_RELEASE);
  if (r->found) {
    r->next = rp.found;
    rp.found = r;
  }
}

void mpn_ucx_report_mismatch(const mpn_ucx_cmd_t* cmd, mpn_ucx_came_t came, size_t got) {
  mpn_ucx_mismatch_t* m = cmd->mismatch;
  mpn_ucx_peer_t* peer = cmd->peer;
  if (peer ? !report_claim(peer) : m->claimed) return; /* (told already, or no way to tell it) */
  report_due(cmd, m->claimed ? &peer->report : m, came, got);
}

/* Whether cmd, failing on this rank, has its peer told (failed_here_note):
 * a communicator's send or receive (not a notice, which has no record). */
static int tells_peer(const mpn_ucx_cmd_t* cmd) {
  return (cmd->kind == MPN_UCX_RECV || cmd->kind == MPN_UCX_SEND) && cmd->mismatch && cmd->peer;
}

/* Marks the peer's record, claimed, as one of cmd's failure on this rank
 * (after the fields that other threads read: mpn_ucx_proxy_unsent); from
 * then on cmd's kind is refused with that peer. */
static void failed_here_mark(const mpn_ucx_cmd_t* cmd) {
  cmd->peer->report.failed_send = cmd->kind == MPN_UCX_SEND;
  __atomic_store_n(&cmd->peer->report.failed_here, 1, __ATOMIC_RELEASE);
}

/* A send or receive of a communicator failed on this rank (UCX could not
 * allocate its request).  A failed receive leaves the sender's message
 * among UCX's unexpected ones, where a later receive of its tag would take
 * it; a failed send leaves the receiver's receive waiting for a message
 * that never comes.  So the peer is told (failed_here: notices.c's hook sends
 * the notice, then fails the receives from it), and no later operation of
 * the failed one's kind with it is started (mpn_ucx_report_refused). */
static void failed_here_note(const mpn_ucx_cmd_t* cmd) {
  if (!tells_peer(cmd) || !report_claim(cmd->peer)) return;
  failed_here_mark(cmd);
  report_due(cmd, &cmd->peer->report, MPN_UCX_CAME_BYTES, 0);
}

void mpn_ucx_proxy_unsent(const mpn_ucx_cmd_t* cmd) {
  if (cmd->kind != MPN_UCX_SEND || !tells_peer(cmd) || !report_claim(cmd->peer)) return;
  mpn_ucx_mismatch_t* r = &cmd->peer->report;
  report_fill(cmd, r, MPN_UCX_CAME_BYTES, 0);
  failed_here_mark(cmd);
  if (r->found == NULL) return;
  /* To the proxy without an allocation (found_take_posted), unless the
   * owner's close began: its closer set closing before it asked the proxy
   * to close, and the proxy drops the owner's records (mpn_ucx_report_drop)
   * under posted_lock after that.  So under the lock either the close is
   * seen here, or the record is listed before the drop, which takes it;
   * one pushed after the drop would be run on freed state. */
  pthread_mutex_lock(&rp.posted_lock);
  if (cmd->closing == NULL || !__atomic_load_n(cmd->closing, __ATOMIC_ACQUIRE)) {
    r->next = rp.found_posted;
    __atomic_store_n(&rp.found_posted, r, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&rp.posted_lock);
}

int mpn_ucx_report_refused(const mpn_ucx_cmd_t* cmd) {
  const mpn_ucx_peer_t* peer = cmd->peer;
  if (!tells_peer(cmd) || !__atomic_load_n(&peer->report.failed_here, __ATOMIC_ACQUIRE)) return 0;
  return cmd->kind == (peer->report.failed_send ? MPN_UCX_SEND : MPN_UCX_RECV);
}

/* The records other threads made due (mpn_ucx_proxy_unsent) join the
 * proxy's own. */
static void found_join_posted_locked(void) {
  mpn_ucx_mismatch_t* r = rp.found_posted;
  rp.found_posted = NULL;
  while (r) {
    mpn_ucx_mismatch_t* next = r->next;
    r->next = rp.found;
    rp.found = r;
    r = next;
  }
}

static void found_take_posted(void) {
  if (__atomic_load_n(&rp.found_posted, __ATOMIC_ACQUIRE) == NULL) return; /* (each round: no lock then) */
  pthread_mutex_lock(&rp.posted_lock);
  found_join_posted_locked();
  pthread_mutex_unlock(&rp.posted_lock);
}

void mpn_ucx_report_run(void) {
  found_take_posted();
  while (rp.found) {
    mpn_ucx_mismatch_t* m = rp.found;
    rp.found = m->next;
    m->next = NULL;
    m->found(m);
  }
}

void mpn_ucx_report_drop(const void* owner) {
  /* Locked even with nothing listed: a push that takes the lock after this
   * sees the close (mpn_ucx_proxy_unsent). */
  pthread_mutex_lock(&rp.posted_lock);
  found_join_posted_locked();
  pthread_mutex_unlock(&rp.posted_lock);
  for (mpn_ucx_mismatch_t** p = &rp.found; *p;) {
    mpn_ucx_mismatch_t* m = *p;
    if (m->owner != owner) {
      p = &m->next;
      continue;
    }
    *p = m->next;
  }
}

int mpn_ucx_report_failed_before(const mpn_ucx_cmd_t* cmd) {
  return (cmd->error && __atomic_load_n(cmd->error, __ATOMIC_ACQUIRE)) ||
         (cmd->user_buffer && cmd->owner_error && __atomic_load_n(cmd->owner_error, __ATOMIC_ACQUIRE));
}

int mpn_ucx_report_signals_loss(const mpn_ucx_cmd_t* cmd) {
  return cmd->kind == MPN_UCX_PUT_SIGNAL && cmd->signal && cmd->desc && cmd->desc_lost;
}

ucs_status_t mpn_ucx_report_put_lost(mpn_ucx_cmd_t* cmd, ucs_status_t status) {
  if (status != UCS_OK) mpn_ucx_report_failure(cmd, status);
  uint32_t lost = 1;
  memcpy((char*)cmd->desc_bytes + (cmd->desc_lost - 1) * sizeof(lost), &lost, sizeof(lost));
  cmd->bytes = 0;
  return UCS_OK;
}
