/*
 * report.c - a message's failures told to both of its sides (report.h):
 * this communicator's last and asynchronous errors, the peer's through
 * the pair.
 */
#include "p2p/report.h"

#include <stdio.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/enqueue.h"
#include "core/error.h"
#include "cuda/event.h"
#include "p2p/pair.h"

/* Writes the message's "message N from rank A to rank B: " into text
 * (size bytes), the words every report of it starts with; returns how many
 * of them fit, so that the caller's own words follow. */
static size_t plan_message_head(const plan_t* p, char* text, size_t size) {
  const mpn_op_t* op = p->op;
  int send = op->kind == MPN_OP_SEND;
  int n = snprintf(text, size, "message %llu from rank %d to rank %d: ", (unsigned long long)p->seq,
                   send ? op->comm->rank : op->peer, send ? op->peer : op->comm->rank);
  return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

/* Leaves text for the message's other side, unless that side is this
 * communicator (a rank to itself), which has it already: it polls the same
 * pair (mpn_p2p_poll_errors) and would take it as a second report, later
 * than and over whatever error came since. */
static void tell_peer(plan_t* p, ncclResult_t code, const char* text) {
  if (p->op->peer != p->op->comm->rank) mpn_pair_report(p->pair, plan_side(p) ^ 1, code, text);
}

void mpn_plan_report_both(plan_t* p, ncclResult_t code, const char* text) {
  tell_peer(p, code, text);
  mpn_comm_fail_async(p->op->comm, code, "%s", text);
}

/* Its number is spent on this side only: the message numbering with that
 * rank is out of step, and the peer's side of this message waits for flags
 * nobody writes.  Both communicators are failed (the peer's through the
 * pair).  A graph message too: the graph that holds its slot may be gone
 * on one side only. */
void mpn_plan_report_refused_post(plan_t* p, const mpn_side_t* mine, ncclResult_t refused) {
  /* Ranks of one process: the event describe recorded for this side; no
   * peer will wait for it and give it back (p2p.c, plan_second). */
  if (p->local) mpn_event_put(mine->event_dev, (cudaEvent_t)(uintptr_t)mine->event);
  char text[256];
  snprintf(text, sizeof(text), "%s; message numbering between ranks %d and %d is out of step: abort the communicator",
           mpn_error_last(NULL), p->op->comm->rank, p->op->peer);
  mpn_plan_report_both(p, refused, text);
}

/* Records a mismatch where both sides find it (peer through the pair). */
void mpn_plan_report_mismatch(plan_t* p, const mpn_side_t* mine, const mpn_side_t* other) {
  const mpn_op_t* op = p->op;
  int send = op->kind == MPN_OP_SEND;
  const mpn_side_t* s = send ? mine : other;
  const mpn_side_t* r = send ? other : mine;
  char text[256];
  size_t n = plan_message_head(p, text, sizeof(text));
  snprintf(text + n, sizeof(text) - n, "ncclSend of %llu x %s, ncclRecv of %llu x %s", (unsigned long long)s->count,
           mpn_dtype_name((ncclDataType_t)s->dtype), (unsigned long long)r->count,
           mpn_dtype_name((ncclDataType_t)r->dtype));
  mpn_plan_report_both(p, ncclInvalidUsage, text);
}

void mpn_plan_report_copy_lost(plan_t* p, ncclResult_t res) {
  const mpn_op_t* op = p->op;
  char text[256];
  size_t n = plan_message_head(p, text, sizeof(text));
  snprintf(text + n, sizeof(text) - n, "rank %d could not enqueue its copy (%s); its data may be missing",
           op->comm->rank, ncclGetErrorString(res));
  mpn_plan_report_both(p, ncclRemoteError, text);
}

/* Tells the message's other side that this side failed and moved nothing:
 * its "done" still comes (nobody hangs), and ncclCommGetAsyncError says why. */
void mpn_plan_report_failed_move(plan_t* p, ncclResult_t res) {
  const mpn_op_t* op = p->op;
  char text[256];
  size_t n = plan_message_head(p, text, sizeof(text));
  snprintf(text + n, sizeof(text) - n, "rank %d could not use the buffers and moved no data (%s)", op->comm->rank,
           ncclGetErrorString(res));
  tell_peer(p, ncclRemoteError, text);
  mpn_comm_fail_async(op->comm, res, "%s", mpn_error_last(NULL)); /* (this side's own refusal) */
}

/* Whether either side refused its buffer, so that nothing moves; says so
 * on both sides (bad: this side's refusal, other: the peer's side).  The
 * side that did not refuse gets ncclRemoteError whichever side posted
 * first (the peer's report through the pair, when this side refused,
 * says the same), unless the peer is this very rank: its own refusal,
 * whose text it has, keeps its own code (other's exported carries it). */
int mpn_plan_buffer_refused(plan_t* p, ncclResult_t bad, const mpn_side_t* other) {
  struct ncclComm* comm = p->op->comm;
  if (other->exported < 0 && p->op->peer == comm->rank) {
    mpn_comm_fail_async(comm, (ncclResult_t)-other->exported, "%s", mpn_error_last(comm));
  } else if (other->exported < 0 && other->proc == mpn_chan_proc_id()) {
    /* the peer could not use its buffer (and was told so): the text of this process names the buffer */
    mpn_comm_fail_async(comm, ncclRemoteError, "%s", mpn_error_last(comm));
  } else if (other->exported < 0) {
    mpn_comm_fail_async(comm, ncclRemoteError,
                        "message %llu with rank %d: the peer refused its buffer (shorter than the message, not "
                        "memory the GPU reaches, or one CUDA IPC cannot share with this process: its "
                        "ncclGetLastError says which); nothing moved",
                        (unsigned long long)p->seq, p->op->peer);
  }
  if (bad != ncclSuccess)
    mpn_plan_report_failed_move(p, bad); /* own buffer unusable: the peer's message completes empty */
  return other->exported < 0 || bad != ncclSuccess;
}
