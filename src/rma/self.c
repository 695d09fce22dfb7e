/*
 * self.c - a rank's one-sided signals to itself.  Only its own streams read
 * them, so stream order can stand in for some of their memory operations:
 * a barrier that signals every rank, itself included, then issues one
 * write and one wait fewer per rank (docs/RMA.md, "A rank's signals to
 * itself").
 *
 * Why leaving a write out is safe where mpn_rma_self_plan allows it: every
 * wait polls for more than the waits before it consumed.  A left-out count
 * is consumed, within its launch, by waits on its own stream, which stream
 * order already satisfies; no wait issued before polls for it (none was
 * outstanding), and every later wait polls for more.  The one other reader
 * of the counter is the next signal to the rank itself when it comes on
 * another stream: it waits for the count before its own (rma.c,
 * add_signal), and for a left-out count it waits instead for a counter
 * that the same stream wrote after the work the left-out signal implies,
 * which only grows.  That work is the stream's earlier work (the launch's
 * copies come before its batch) and the rank's previous count to itself,
 * which must then have come from the same stream too: a previous count of
 * another stream would be waited for inside the batch, possibly after the
 * stand-in's write.
 */
#include "rma/self.h"

#include "core/comm.h"
#include "core/param.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "rma/local.h"
#include "rma/rma.h"

static int is_signal_to(const mpn_op_t* op, const struct ncclComm* comm, int peer, int ctx) {
  return op->comm == comm && op->kind != MPN_OP_WAIT_SIGNAL && op->peer == peer && op->ctx == ctx;
}

static int is_self_signal(const mpn_op_t* op, const struct ncclComm* comm, int ctx) {
  return is_signal_to(op, comm, comm->rank, ctx);
}

/* Stream s's signals of this launch from comm's rank to (peer, ctx). */
static uint64_t signals_on(mpn_op_t** ops, int n, cudaStream_t s, const struct ncclComm* comm, int peer, int ctx) {
  uint64_t k = 0;
  for (int i = 0; i < n; i++) k += ops[i]->stream == s && is_signal_to(ops[i], comm, peer, ctx);
  return k;
}

static int waits_for_self(const mpn_op_t* op, const struct ncclComm* comm, int ctx) {
  for (int e = 0; op->comm == comm && op->kind == MPN_OP_WAIT_SIGNAL && e < op->ndesc; e++)
    if (op->descs[e].peer == comm->rank && op->descs[e].ctx == ctx) return 1;
  return 0;
}

int mpn_rma_self_local(const mpn_op_t* op) {
  return op->peer == op->comm->rank && mpn_rma_local(op->comm, op->peer, 0);
}

void mpn_rma_self_counts(mpn_op_t** ops, int n, cudaStream_t s, const struct ncclComm* comm, int ctx, uint64_t* sent,
                         uint64_t* expected) {
  size_t pc = mpn_rma_pc(comm, comm->rank, ctx);
  *sent = comm->rma->sent[pc] + signals_on(ops, n, s, comm, comm->rank, ctx);
  *expected = comm->rma->expected[pc];
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = ops[i];
    if (op->stream != s || op->comm != comm) continue;
    if (op->kind == MPN_OP_WAIT_SIGNAL) *expected += mpn_descs_wanted(op->descs, op->ndesc, comm->rank, ctx);
  }
}

int mpn_rma_self_wait_syncs(mpn_op_t** ops, int n, cudaStream_t s, const mpn_op_t* op, int d) {
  uint64_t sent, expected;
  mpn_rma_self_counts(ops, n, s, op->comm, op->descs[d].ctx, &sent, &expected);
  return sent >= expected;
}

int mpn_rma_self_consumed(mpn_op_t** ops, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = ops[i];
    for (int e = 0; op->stream != s && op->kind == MPN_OP_WAIT_SIGNAL && e < op->ndesc; e++)
      if (op->descs[e].peer == op->comm->rank && mpn_rma_local(op->comm, op->comm->rank, 0)) return 0;
    if (op->kind == MPN_OP_WAIT_SIGNAL || !mpn_rma_self_local(op)) continue;
    if (op->stream != s) return 0;
    uint64_t sent, expected;
    mpn_rma_self_counts(ops, n, s, op->comm, op->ctx, &sent, &expected);
    if (sent > expected) return 0;
  }
  return 1;
}

int mpn_rma_self_wait_implied(const struct ncclComm* comm, const ncclWaitSignalDesc_t* d, unsigned long long sid,
                              uint64_t expected) {
  size_t pc = mpn_rma_pc(comm, comm->rank, d->ctx);
  return d->peer == comm->rank && sid != 0 && !mpn_rma_local(comm, d->peer, 0) && comm->rma->sent_stream[pc] == sid &&
         comm->rma->sent[pc] >= expected;
}

/* The last signal of stream s to a rank of comm other than its own that is
 * a memory write of the batch (within the host, not ordered by events):
 * its counter stands in for the rank's own.  NULL if none. */
static const mpn_op_t* stand_in(mpn_op_t** ops, int n, cudaStream_t s, const struct ncclComm* comm) {
  const mpn_op_t* last = NULL;
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = ops[i];
    if (op->stream == s && op->comm == comm && op->kind != MPN_OP_WAIT_SIGNAL && op->peer != comm->rank &&
        !mpn_rma_over_ucx(comm, op->peer) && !mpn_rma_local(comm, op->peer, 0))
      last = op;
  }
  return last;
}

/* Whether a stream of the launch other than s signals or waits for comm's
 * rank itself on ctx: the counts would interleave. */
static int self_elsewhere(mpn_op_t** ops, int n, cudaStream_t s, const struct ncclComm* comm, int ctx) {
  for (int i = 0; i < n; i++)
    if (ops[i]->stream != s && (is_self_signal(ops[i], comm, ctx) || waits_for_self(ops[i], comm, ctx))) return 1;
  return 0;
}

/* Plans the one (comm, ctx) of op, the first of s's signals to itself there. */
static void plan_one(mpn_op_t** ops, int n, cudaStream_t s, unsigned long long sid, const mpn_op_t* op) {
  struct ncclComm* comm = op->comm;
  mpn_rma_self_t* self = &comm->rma->self[op->ctx];
  size_t pc = mpn_rma_pc(comm, comm->rank, op->ctx);
  uint64_t sent0 = comm->rma->sent[pc], expected0 = comm->rma->expected[pc], sent, expected;
  self->upto = sent0; /* nothing left out unless all of the below holds */
  if (sid == 0 || mpn_param_int(MPN_PARAM_RMA_SELF_ELIDE) <= 0 || mpn_rma_local(comm, comm->rank, 0)) return;
  if (expected0 > sent0) return; /* a wait issued before polls for one of this launch's counts */
  /* The previous count came from another stream: s's first signal to itself
   * waits for it in the batch (rma.c, add_signal), and a stand-in written
   * before that wait would not imply it. */
  if (sent0 > 0 && comm->rma->sent_stream[pc] != sid) return;
  mpn_rma_self_counts(ops, n, s, comm, op->ctx, &sent, &expected);
  if (sent > expected || self_elsewhere(ops, n, s, comm, op->ctx)) return;
  const mpn_op_t* stand = stand_in(ops, n, s, comm);
  mpn_pair_t *to, *from;
  if (stand == NULL || mpn_p2p_pairs(comm, stand->peer, &to, &from) != ncclSuccess) return;
  /* The stand-in's last write of s in this launch: its count once s's
   * signals to that peer and context are counted (streams issued after s
   * count theirs later). */
  uint64_t value =
      comm->rma->sent[mpn_rma_pc(comm, stand->peer, stand->ctx)] + signals_on(ops, n, s, comm, stand->peer, stand->ctx);
  self->upto = sent;
  self->plan_addr = mpn_pair_signal(to, stand->ctx);
  self->plan_value = value;
}

void mpn_rma_self_plan(mpn_op_t** ops, int n, cudaStream_t s, unsigned long long sid) {
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = ops[i];
    if (op->stream != s || !is_self_signal(op, op->comm, op->ctx)) continue;
    int first = 1;
    for (int j = 0; j < i && first; j++) first = !(ops[j]->stream == s && is_self_signal(ops[j], op->comm, op->ctx));
    if (first) plan_one(ops, n, s, sid, op);
  }
}

int mpn_rma_self_elide(const mpn_op_t* op, uint64_t count) {
  mpn_rma_self_t* self = &op->comm->rma->self[op->ctx];
  if (op->peer != op->comm->rank || count > self->upto) return 0;
  self->elided = count;
  self->stand_addr = self->plan_addr;
  self->stand_value = self->plan_value;
  return 1;
}

void mpn_rma_self_order(const mpn_op_t* op, uint64_t count, CUdeviceptr counter, CUdeviceptr* addr, uint64_t* value) {
  const mpn_rma_self_t* self = &op->comm->rma->self[op->ctx];
  int stand = op->peer == op->comm->rank && self->elided != 0 && self->elided == count - 1;
  *addr = stand ? self->stand_addr : counter;
  *value = stand ? self->stand_value : count - 1;
}
