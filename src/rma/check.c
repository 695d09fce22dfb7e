/*
 * check.c - the checks of one-sided operations that need the window, the
 * device or the transport, made for a whole group before anything of it is
 * enqueued (the API entry points check their arguments themselves).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/apply.h"
#include "cuda/buffer.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "rma/rma.h"
#include "rma/window.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/staged.h"
#include "ucx/winstage.h"
#endif

const char* mpn_rma_op_name(mpn_op_kind_t kind) {
  switch (kind) {
    case MPN_OP_PUT_SIGNAL: return "ncclPutSignal";
    case MPN_OP_SIGNAL: return "ncclSignal";
    default: return "ncclWaitSignal";
  }
}

/* A peer over UCX: only once a window gave the communicator its signal area. */
static ncclResult_t peer_check(const mpn_op_t* op, const char* fn, int peer) {
  struct ncclComm* comm = op->comm;
  if (!mpn_rma_over_ucx(comm, peer)) return ncclSuccess;
#ifdef HAVE_UCX
  /* (an invalidated capture is refused for every peer before: group.c, capture_check) */
  if (!mpn_ucx_rma_ready(comm))
    return MPN_REFUSE(comm, ncclInvalidUsage,
                      "%s with peer %d: one-sided operations over UCX need a window registered "
                      "first (ncclCommWindowRegister)",
                      fn, peer);
  return ncclSuccess;
#else
  return MPN_REFUSE(comm, ncclInvalidUsage,
                    "%s with peer %d: the UCX transport (other hosts, or forced by "
                    "MPINCCL_TRANSPORT=ucx / NCCL_P2P_DISABLE=1) is not in this build of mpinccl",
                    fn, peer);
#endif
}

/* A put or signal over UCX: its lane made (and fitted) before anything is enqueued. */
static ncclResult_t ucx_check(const mpn_op_t* op) {
#ifdef HAVE_UCX
  if (mpn_rma_over_ucx(op->comm, op->peer)) return mpn_ucx_staged_check(op);
#else
  (void)op;
#endif
  return ncclSuccess;
}

/* A wait for more signals of one peer and context over UCX than its ring
 * keeps (MPN_APPLY_RING) could never land their puts: the ring's first
 * entries are overwritten by the time the count is reached. */
static ncclResult_t ucx_wait_check(const mpn_op_t* op, const char* fn) {
#ifdef HAVE_UCX
  for (int i = 0; i < op->ndesc; i++) {
    const ncclWaitSignalDesc_t* d = &op->descs[i];
    if (!mpn_rma_over_ucx(op->comm, d->peer)) continue;
    uint64_t n = mpn_descs_wanted(op->descs, op->ndesc, d->peer, d->ctx);
    if (n > MPN_APPLY_RING)
      return MPN_REFUSE(op->comm, ncclInvalidArgument,
                        "%s: signalDescs[%d].opCnt %d: %llu signals of rank %d on ctx %d in one call, over UCX, "
                        "where at most %d may be outstanding between two ranks on one context; wait for them "
                        "in several calls, each after the peer sent at most that many",
                        fn, i, d->opCnt, (unsigned long long)n, d->peer, d->ctx, MPN_APPLY_RING);
  }
#else
  (void)op, (void)fn;
#endif
  return ncclSuccess;
}

/* A wait naming a peer that ended its communicator normally passed its
 * call for signals the peer sent (left.c); captured, every replay would
 * wait for them anew, and the peer sends no more. */
static ncclResult_t left_capture_check(const mpn_op_t* op, const char* fn, int i) {
  int peer = op->descs[i].peer;
  if (!mpn_comm_peer_ended(op->comm, peer)) return ncclSuccess;
  return MPN_REFUSE(op->comm, ncclRemoteError,
                    "%s: signalDescs[%d]: rank %d ended its communicator (ncclCommDestroy) and its process exited; "
                    "a wait captured in a CUDA graph would wait at every replay for signals it sends no more; "
                    "nothing of the group was enqueued",
                    fn, i, peer);
}

/* The checks that need the window and the device, before anything is enqueued. */
static ncclResult_t op_check(const mpn_op_t* op) {
  struct ncclComm* comm = op->comm;
  const char* fn = mpn_rma_op_name(op->kind);
  if (comm->cuda_dev < 0) return MPN_REFUSE(comm, ncclInvalidUsage, "%s: comm %p has no CUDA device", fn, (void*)comm);
  if (op->kind == MPN_OP_WAIT_SIGNAL) {
    for (int i = 0; i < op->ndesc; i++) MPN_CHECK(peer_check(op, fn, op->descs[i].peer));
    for (int i = 0; i < op->ndesc && op->capturing; i++) MPN_CHECK(left_capture_check(op, fn, i));
    return ucx_wait_check(op, fn);
  }
  MPN_CHECK(peer_check(op, fn, op->peer));
  if (op->kind != MPN_OP_PUT_SIGNAL) return ucx_check(op);
  MPN_CHECK(mpn_win_check(comm, op->win, fn, "peerWin"));
  uint64_t size = op->win->parts[op->peer].size;
  if (op->offset > size || op->bytes > size - op->offset)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: peerWinOffset %zu + %zu bytes runs past the end of rank %d's window "
                      "(%llu bytes)",
                      fn, op->offset, op->bytes, op->peer, (unsigned long long)size);
  /* device, managed, or pinned host memory the GPU reaches at that address, as long as the put */
  MPN_CHECK(mpn_cuda_buffer_check(comm, fn, "localbuff", op->buf, op->bytes, op->capturing ? MPN_BUFFER_CAPTURING : 0));
  return ucx_check(op);
}

/* Captured signals and waits of (comm, peer, ctx) in the group from op on:
 * signals (send) or waited-for counts. */
static uint64_t captured_from(const mpn_op_t* op, const struct ncclComm* comm, int peer, int ctx, int send) {
  uint64_t n = 0;
  for (; op; op = op->next) {
    if (op->comm != comm || !op->capturing) continue;
    if (send && op->kind != MPN_OP_WAIT_SIGNAL) n += op->peer == peer && op->ctx == ctx;
    if (!send && op->kind == MPN_OP_WAIT_SIGNAL) n += mpn_descs_wanted(op->descs, op->ndesc, peer, ctx);
  }
  return n;
}

enum { SLOTS_HELD, SLOTS_FREE, SLOTS_OWN, SLOTS_ERROR };

#ifdef HAVE_UCX
/* graph_slots_state over UCX, where each side keeps its own slot words
 * (ucx/winstage.c): this side's graphs, and on the sending side the peer's
 * taking of the last replay. */
static int ucx_slots_state(struct ncclComm* comm, int peer, int ctx, int send, uint64_t first, uint64_t n,
                           unsigned long long capture) {
  uint64_t per_ctx = mpn_rma_graph_per_ctx(comm);
  for (uint64_t seq = first + 1; seq <= first + n; seq++) {
    if (seq <= per_ctx) continue;
    int slot = (int)mpn_rma_graph_slot(comm, ctx, seq);
    int state = mpn_ucx_rma_graph_slot_state(comm, peer, slot, seq - per_ctx, send, capture);
    if (state != MPN_UCX_GSLOT_FREE) return state == MPN_UCX_GSLOT_OWN ? SLOTS_OWN : SLOTS_HELD;
  }
  return SLOTS_FREE;
}
#endif

/* Whether the captured signals first + 1 .. first + n of (comm, peer, ctx)
 * may take their slots (rma.c, graph_slot): SLOTS_FREE, SLOTS_HELD (by a
 * graph not yet destroyed), SLOTS_OWN (by this side's capture `capture`,
 * which cannot end first), SLOTS_ERROR (the pair failed to map: *err);
 * *pair: the pair they live in (NULL over UCX). */
static int graph_slots_state(struct ncclComm* comm, int peer, int ctx, int send, uint64_t first, uint64_t n,
                             unsigned long long capture, mpn_pair_t** pair, ncclResult_t* err) {
  uint64_t per_ctx = mpn_rma_graph_per_ctx(comm);
  *pair = NULL;
  if (first + n <= per_ctx) return SLOTS_FREE;
#ifdef HAVE_UCX
  if (mpn_rma_over_ucx(comm, peer)) return ucx_slots_state(comm, peer, ctx, send, first, n, capture);
#endif
  mpn_pair_t *to = NULL, *from = NULL;
  if ((*err = mpn_p2p_pairs(comm, peer, &to, &from)) != ncclSuccess) return SLOTS_ERROR;
  *pair = send ? to : from;
  int side = send ? MPN_SIDE_SEND : MPN_SIDE_RECV;
  for (uint64_t seq = first + 1; seq <= first + n; seq++) {
    uint32_t slot = mpn_rma_graph_slot(comm, ctx, seq);
    if (mpn_pair_rma_graph_free(*pair, slot, seq, per_ctx)) continue;
    if (capture && __atomic_load_n(&(*pair)->mem->rma_graph_capture[slot][side], __ATOMIC_ACQUIRE) == capture)
      return SLOTS_OWN;
    return SLOTS_HELD;
  }
  return SLOTS_FREE;
}

/* Refuses a group whose captured signals of (peer, ctx) find a slot held:
 * nothing of it is enqueued.  The peer may have taken its side of them,
 * so both communicators are failed (through the pair), as for a refused
 * send/receive; over UCX (pair NULL) only this one, the peer cannot be told. */
static ncclResult_t graph_slots_refuse(const mpn_op_t* op, int peer, int ctx, int send, mpn_pair_t* pair,
                                       uint64_t per_ctx, int own) {
  char text[512];
  snprintf(text, sizeof(text),
           "%s with rank %d on context %d: a slot of the %llu for %s captured in CUDA graphs between two ranks "
           "on one context is still held by one %llu before, %s; nothing of the group was enqueued",
           mpn_rma_op_name(op->kind), peer, ctx, (unsigned long long)per_ctx, send ? "signals" : "waited-for signals",
           (unsigned long long)per_ctx,
           own    ? "taken by the same CUDA graph capture (at most that many per graph): signal numbering with that "
                    "rank is out of step, abort the communicator"
           : pair ? "whose CUDA graph is not destroyed on one side or both within MPINCCL_AHEAD_TIMEOUT (or a "
                    "communicator failed): signal numbering with that rank is out of step, abort the communicator"
                  : "whose CUDA graph is not destroyed on this side, or (over UCX) whose last replay's signal the "
                    "peer did not take, within MPINCCL_AHEAD_TIMEOUT (or a communicator failed): signal numbering "
                    "with that rank is out of step, abort the communicator");
  if (pair && peer != op->comm->rank)
    mpn_pair_report(pair, send ? MPN_SIDE_RECV : MPN_SIDE_SEND, ncclInvalidUsage, text);
  mpn_comm_fail_async(op->comm, ncclInvalidUsage, "%s", text);
  return MPN_REFUSE(NULL, ncclInvalidUsage, "%s", text); /* (the call's, comm's unless an earlier failure is) */
}

/* Whether a wait for slots should end: the communicator was aborted or
 * failed (a peer gone), or the group's deadline passed (0: not set yet). */
static int graph_slots_give_up(struct ncclComm* comm, uint64_t* deadline) {
  if (comm->abort_flag || mpn_comm_peer_failure(comm) != ncclSuccess) return 1;
  if (*deadline == 0) *deadline = mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_AHEAD_TIMEOUT) * 1000000000ull;
  return mpn_clock_now_ns() > *deadline;
}

/* Captured signals use slots of their own, which a context's signals take
 * in turn (rma.c, graph_slot).  Before anything of the group is enqueued
 * (a peer's captured wait would otherwise wait for a signal never sent),
 * each one's slot must be free: its last signal's graphs destroyed on both
 * sides (over UCX: on this side, and the peer took the last replay's
 * signal).  The host waits for that, at most MPINCCL_AHEAD_TIMEOUT for the
 * whole group, taking in the news of destroyed graphs.  More signals of one
 * (peer, context) in one group than it has slots, or a slot this side's
 * capture itself holds, are refused at once. */
static ncclResult_t graph_slots_check(const mpn_op_t* ops) {
  uint64_t deadline = 0;
  for (const mpn_op_t* op = ops; op; op = op->next) {
    struct ncclComm* comm = op->comm;
    if (!op->capturing) continue; /* (ncclGroupEnd's capture_check asked) */
    uint64_t per_ctx = mpn_rma_graph_per_ctx(comm);
    int n = op->kind == MPN_OP_WAIT_SIGNAL ? op->ndesc : 1;
    for (int i = 0; i < n; i++) {
      int send = op->kind != MPN_OP_WAIT_SIGNAL;
      int peer = send ? op->peer : op->descs[i].peer, ctx = send ? op->ctx : op->descs[i].ctx;
      size_t pc = mpn_rma_pc(comm, peer, ctx);
      uint64_t used = comm->rma == NULL ? 0 : send ? comm->rma->graph_sent[pc] : comm->rma->graph_expected[pc];
      uint64_t more = captured_from(op, comm, peer, ctx, send);
      if (more > per_ctx)
        return MPN_REFUSE(comm, ncclInvalidUsage,
                          "%s with rank %d on context %d: more than %llu %s between two ranks on one "
                          "context captured in one group; nothing of the group was enqueued",
                          mpn_rma_op_name(op->kind), peer, ctx, (unsigned long long)per_ctx,
                          send ? "signals" : "waited-for signals");
      mpn_pair_t* pair = NULL;
      ncclResult_t err = ncclSuccess;
      int state;
      while ((state = graph_slots_state(comm, peer, ctx, send, used, more, op->capture_id, &pair, &err)) !=
             SLOTS_FREE) {
        if (state == SLOTS_ERROR) return err;
        if (state == SLOTS_OWN || graph_slots_give_up(comm, &deadline))
          return graph_slots_refuse(op, peer, ctx, send, pair, per_ctx, state == SLOTS_OWN);
        usleep(20);
        mpn_pair_graph_reap(); /* graphs destroyed meanwhile on this side */
      }
    }
  }
  return ncclSuccess;
}

ncclResult_t mpn_rma_check(mpn_op_t* ops) {
  for (mpn_op_t* op = ops; op; op = op->next) MPN_CHECK(op_check(op));
  return graph_slots_check(ops);
}
