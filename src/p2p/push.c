/*
 * push.c - each side moves its own large sends between processes on
 * different GPUs (push.h).  bench/ipc_copies on two NVLinked H200s: one
 * process pushing and pulling through CUDA IPC moved 198 GB/s per copy, on
 * one stream or two; each process pushing its own, 391.
 */
#include "p2p/push.h"

#include <sched.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/param.h"
#include "transport.h"

/* A message the rule may concern: with another process on another GPU, large. */
static int push_sized(const plan_t* p) {
  const mpn_op_t* op = p->op;
  const struct ncclComm* comm = op->comm;
  return p->prepared && op->bytes >= (size_t)mpn_param_int(MPN_PARAM_PUSH_MIN) && /* cheapest first: every send */
         comm->transport[op->peer] == MPN_TRANSPORT_IPC && !mpn_topo_same_gpu(&comm->topo, comm->rank, op->peer);
}

void mpn_push_mark(plan_t* plans, int n) {
  if (mpn_param_int(MPN_PARAM_PUSH_WAIT) <= 0) return;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (p->op->kind != MPN_OP_SEND || !push_sized(p)) continue;
    for (int k = 0; k < n && !p->push; k++) {
      const mpn_op_t* q = plans[k].op;
      p->push = q->kind == MPN_OP_RECV && q->comm == p->op->comm && q->peer == p->op->peer && push_sized(&plans[k]);
    }
  }
}

int mpn_push_pending(const plan_t* p) {
  return p->push && !mpn_pair_peer_posted(p->pair, p->seq, p->graph, MPN_SIDE_SEND);
}

int mpn_push_wait(const plan_t* plans, const char* done, int n, uint64_t* deadline) {
  if (*deadline == 0) *deadline = mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_PUSH_WAIT) * 1000;
  for (;;) {
    for (int i = 0; i < n; i++) {
      const plan_t* p = &plans[i];
      if (done[i] || !p->push) continue;
      if (!mpn_push_pending(p)) return 1;
      if (mpn_comm_peer_failure(p->op->comm) != ncclSuccess || p->op->comm->abort_flag) return 0;
    }
    if (mpn_clock_now_ns() > *deadline) return 0;
    sched_yield(); /* the peer's process may share this core */
  }
}
