/*
 * eager.c - which messages take an inbox (eager.h): a ring outside graphs,
 * a graph slot's own slot when captured, as the first side decides, and
 * what a message through an inbox copies.
 */
#include "p2p/eager.h"

#include "core/comm.h"
#include "core/param.h"
#include "p2p/plan.h"
#include "p2p/sliced.h"
#include "transport.h"

void mpn_eager_choose(struct mpn_plan* p) {
  const mpn_op_t* op = p->op;
  const mpn_topo_t* t = &op->comm->topo;
  mpn_transport_kind_t kind = op->comm->transport[op->peer];
  /* Where both processes' kernels run at once (MPS, or processes on
   * different GPUs); on a time-sliced GPU only in launches with several of
   * its processes (sliced.c: elsewhere both sides' copies would cost a
   * context switch that delegation avoids).  A free slot is checked when
   * posting (p2p.c, plan_post). */
  size_t small = (size_t)mpn_param_int(MPN_PARAM_EAGER_MAX), big = (size_t)mpn_param_int(MPN_PARAM_EAGER_BIG_MAX);
  /* Between GPUs only the small ring: on two H200s the big ring's two
   * copies made 256 KiB messages slower than the direct copy (14.5-15.0 us
   * against 12.2-13.4), while the small ring took 64 B sendrecv from
   * 14.8-15.1 to 10.0 us. */
  if (!mpn_topo_same_gpu(t, op->comm->rank, op->peer)) big = 0;
  int concurrent = mpn_topo_kernels_concurrent(t, op->comm->rank, op->peer);
  int inbox = !p->graph && kind == MPN_TRANSPORT_IPC &&
              (concurrent || (mpn_sliced_peer(op) && mpn_param_int(MPN_PARAM_SLICED_INBOX_WAIT) > 0)) &&
              small > 0; /* 0: no inbox at all */
  p->eager_ok = !inbox               ? MPN_EAGER_NONE
                : op->bytes <= small ? MPN_EAGER_SMALL
                : op->bytes <= big   ? MPN_EAGER_BIG
                                     : MPN_EAGER_NONE;
  /* Captured: small messages through their graph slot's inbox, if their
   * launch holds enough of them (mpn_eager_graph_by_launch).  Its sender
   * waits for bits clear (a NOR wait), so both ranks' GPUs must have it:
   * the second side follows the first's choice. */
  if (p->graph && kind == MPN_TRANSPORT_IPC && concurrent && mpn_param_int(MPN_PARAM_EAGER_GRAPH) > 0 && small > 0 &&
      op->bytes <= small && t->ranks[op->comm->rank].wait_nor && t->ranks[op->peer].wait_nor && p->pair &&
      mpn_eager_graph_ok(p->pair)) /* (a pair block made without the graph slots' inbox: counted for nothing) */
    p->eager_ok = MPN_EAGER_GRAPH;
}

static int same_stream_graph(const struct mpn_plan* p, const struct mpn_plan* q) {
  return q->eager_ok == MPN_EAGER_GRAPH && q->op->stream == p->op->stream;
}

/*
 * Measured under MPS (bench/results/2026-11-30-h200-s38, calls 4, 5, 7):
 * launches of few such messages replay faster with two hops (a 2-rank
 * sendrecv of 8 B, interleaved, 5.9-6.0 against 6.5-6.6 us; a 4-rank
 * all-to-all of 4 KiB, 6 messages, 12.8-13.3 against 14.0-14.2: the
 * inbox's copy out is a second round of the kernel), launches of many
 * faster through the inbox (an 8-rank all-to-all, 14 messages, 25.2-25.9
 * against 27.5-28.4 us; halos of 26 neighbours, 52 messages, 0.8-0.9 of
 * the time at 2 ranks, a quarter at 8).
 */
void mpn_eager_graph_by_launch(struct mpn_plan* plans, int n) {
  int fewest = mpn_param_int(MPN_PARAM_EAGER_GRAPH);
  for (int i = 0; i < n; i++) {
    if (plans[i].eager_ok != MPN_EAGER_GRAPH) continue;
    int first = 1; /* the stream's first such message: decide for them all */
    for (int j = 0; j < i && first; j++) first = !same_stream_graph(&plans[i], &plans[j]);
    if (!first) continue;
    int count = 0;
    for (int j = i; j < n && count < fewest; j++) count += same_stream_graph(&plans[i], &plans[j]);
    for (int j = n - 1; j >= i && count < fewest; j--)
      if (same_stream_graph(&plans[i], &plans[j])) plans[j].eager_ok = MPN_EAGER_NONE;
  }
}

void mpn_eager_plan(struct mpn_plan* p, int kind, size_t bytes) {
  const mpn_op_t* op = p->op;
  void* slot = (void*)(uintptr_t)mpn_eager_data(p->pair, kind, p->eager_n);
  p->eager = kind;
  p->eager_bytes = bytes;
  p->src = op->kind == MPN_OP_SEND ? op->buf : slot;
  p->dst = op->kind == MPN_OP_SEND ? slot : op->buf;
  p->move = 1;
}
