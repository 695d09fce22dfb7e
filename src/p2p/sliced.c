/*
 * sliced.c - a launch's choices where processes time-slice their GPU (no
 * MPS): whether one of two processes moves both directions (delegation)
 * or the messages take the receivers' inboxes (sliced.h).
 */
#include "p2p/sliced.h"

#include "core/clock.h"
#include "core/comm.h"
#include "core/param.h"
#include "p2p/eager.h"
#include "transport.h"

/* Whether op's peer is another process on this rank's time-sliced GPU. */
int mpn_sliced_peer(const mpn_op_t* op) {
  const struct ncclComm* comm = op->comm;
  return comm->transport[op->peer] == MPN_TRANSPORT_IPC && comm->topo.gpu_sliced[comm->rank] &&
         mpn_topo_same_gpu(&comm->topo, comm->rank, op->peer);
}

/*
 * Of two ranks of different processes that share a GPU, the lower one moves
 * the data of both directions whenever the other has posted its side first:
 * then only one process needs the GPU's engines in an exchange, and without
 * MPS that saves a context switch (the "delegated" floor of the benchmark).
 * So before posting, such a rank waits on the host, at most
 * MPINCCL_DELEGATE_WAIT_US for the whole launch, for its peers' posts; a
 * peer that comes later than that simply finds itself second and copies.
 * Under MPS nothing switches and the wait only adds latency (8 B sendrecv
 * 9.4 us without it, 10.8 with it on the GPU machine): not done there.
 */
static int delegates(const plan_t* p) {
  return p->prepared && p->op->comm->rank < p->op->peer && mpn_sliced_peer(p->op);
}

/*
 * Delegation spares the other process the engines only where the launch
 * exchanges with that one process alone.  With several peers on the GPU
 * (a halo of 8 ranks on one GPU) every process needs the engines anyway and
 * the wait is only host time: in run l the 8-rank halo took 162 us of host
 * time per group with it, 111 us without, and 1498 against 1429 us per
 * exchange.  Whether the launch's messages with processes on this
 * time-sliced GPU all go to one peer:
 */
int mpn_sliced_one_peer(const plan_t* plans, int n) {
  const mpn_op_t* first = NULL;
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = plans[i].op;
    /* (a message of no bytes needs no engine: a sync with another peer
     * leaves the launch one peer's exchange) */
    if (!plans[i].prepared || !mpn_sliced_peer(op) || op->bytes == 0) continue;
    if (first == NULL) first = op;
    else if (op->comm != first->comm || op->peer != first->peer) return 0;
  }
  return 1;
}

/* The launch's first message with a process of a time-sliced GPU that is
 * not captured: its stream is where the gap between launches is timed. */
const plan_t* mpn_sliced_timed(const plan_t* plans, int n) {
  for (int i = 0; i < n; i++)
    if (plans[i].prepared && !plans[i].graph && mpn_sliced_peer(plans[i].op)) return &plans[i];
  return NULL;
}

/*
 * On a time-sliced GPU, the inbox is for launches with several of its
 * processes, and for launches with one whose rank computes between them
 * (gap.h): delegation spares the other process the engines only where it
 * runs nothing else on the GPU (bench/mpinccl_protocols, after a 100 us
 * kernel per rank: one hop 1.01x the flag-only exchange, delegation 1.41x;
 * 8 B sendrecv with nothing between launches: delegation 13 us, one hop
 * 155 us).  Where none of those messages may take the inbox (parameters,
 * sizes, flags in host memory), delegation still saves a switch.  Returns
 * whether the launch delegates.
 */
int mpn_sliced_inbox(plan_t* plans, int n, int one_peer, int computes) {
  if (!one_peer) return 0;
  for (int i = 0; computes && i < n; i++)
    if (plans[i].prepared && mpn_sliced_peer(plans[i].op) && plans[i].eager_ok != MPN_EAGER_NONE &&
        plans[i].pair->dflags != 0)
      return 0;
  for (int i = 0; i < n; i++)
    if (plans[i].prepared && mpn_sliced_peer(plans[i].op)) plans[i].eager_ok = MPN_EAGER_NONE;
  return 1;
}

int mpn_sliced_delegate_wait(const plan_t* plans, int n, int delegating) {
  int64_t budget_us = mpn_param_int(MPN_PARAM_DELEGATE_WAIT);
  uint64_t deadline = 0;
  if (!delegating) return -1;
  for (int i = 0; i < n && budget_us > 0; i++) {
    const plan_t* p = &plans[i];
    if (!delegates(p)) continue;
    if (deadline == 0) deadline = mpn_clock_now_ns() + (uint64_t)budget_us * 1000;
    while (!mpn_pair_peer_posted(p->pair, p->seq, p->graph, plan_side(p)))
      if (mpn_clock_now_ns() > deadline) return i;
  }
  return -1;
}
