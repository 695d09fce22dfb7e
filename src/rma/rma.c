/*
 * rma.c - ncclPutSignal, ncclSignal and ncclWaitSignal within a host.
 *
 * A launch checks every operation first (nothing is enqueued for a group
 * with a bad one), then issues per stream: the puts' copies (small ones
 * within a GPU batched into one kernel), one memop batch with the signal
 * writes in program order, and one with the waits (one batch for both
 * where the launch has one stream: one_batch).  A signal writes the
 * sender's running count for (peer, ctx) into the pair file the two ranks
 * share, after the copies in stream order, so a receiver that sees count n
 * sees every put enqueued before the n-th signal on that stream (and, as
 * a signal on another stream waits for the count before it, before the
 * earlier signals).  Counts only grow, so signals that arrive before their
 * wait is enqueued are kept.
 * Signals captured in CUDA graphs use flags of their own (graph_slot);
 * between ranks of one process under MPS, events order the streams
 * (local.c).  With peers over UCX, puts and signals go through the staging
 * lanes and waits are followed by the kernel that lands the puts
 * (ucx/winstage.c).
 */
#include "rma/rma.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/drain.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/copies.h"
#include "cuda/device.h"
#include "cuda/driver.h"
#include "cuda/event.h"
#include "cuda/memop.h"
#include "p2p/graphs.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "rma/local.h"
#include "rma/window.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/graph.h"
#include "ucx/net.h"
#include "ucx/staged.h"
#include "ucx/winstage.h"
#endif

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;

ncclResult_t mpn_rma_state(struct ncclComm* comm, mpn_rma_t** out) {
  mpn_rma_t* rma = __atomic_load_n(&comm->rma, __ATOMIC_ACQUIRE);
  if (rma == NULL) {
    pthread_mutex_lock(&state_lock);
    rma = comm->rma;
    if (rma == NULL) {
      /* numRmaCtx 0 (no one-sided operation passes the checks) still gets
       * its state, empty: the window registration makes it. */
      size_t nctx = comm->config.num_rma_ctx > 0 ? (size_t)comm->config.num_rma_ctx : 1;
      size_t n = (size_t)comm->nranks * nctx;
      rma = calloc(1, sizeof(*rma));
      uint64_t* counts = calloc(4 * n, sizeof(uint64_t));
      unsigned long long* streams = calloc(n, sizeof(*streams));
      mpn_rma_self_t* self = calloc(nctx, sizeof(*self));
      if (rma == NULL || counts == NULL || streams == NULL || self == NULL) {
        free(rma), free(counts), free(streams), free(self);
        rma = NULL;
      } else {
        rma->sent_stream = streams;
        rma->self = self;
        pthread_mutex_init(&rma->lock, NULL);
        rma->sent = counts;
        rma->expected = counts + n;
        rma->graph_sent = counts + 2 * n;
        rma->graph_expected = counts + 3 * n;
        __atomic_store_n(&comm->rma, rma, __ATOMIC_RELEASE);
      }
    }
    pthread_mutex_unlock(&state_lock);
  }
  if (rma == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  *out = rma;
  return ncclSuccess;
}

void mpn_rma_free(struct ncclComm* comm, int abandon) {
  if (comm->rma == NULL) return;
  mpn_win_free_all(comm, abandon);
  pthread_mutex_destroy(&comm->rma->lock);
  free(comm->rma->sent); /* all four counters */
  free(comm->rma->sent_stream);
  free(comm->rma->self);
  free(comm->rma);
  comm->rma = NULL;
}

/* What a launch's captures hold until their graphs are gone: graph slots
 * (graph_slot, below) and imports (issue_puts); attached at its end. */
static __thread mpn_graph_holds_t* launch_holds;

/* One put's destination, resolved before anything is issued. */
typedef struct {
  void* dst;
  int imported;
  mpn_ipc_ref_t ref;
} put_t;

/* The puts' copies on stream s, then one event for the imports they used
 * (captured: each import is held open until the graph is gone). */
static ncclResult_t issue_puts(mpn_op_t** ops, put_t* puts, int n, cudaStream_t s, int graph) {
  mpn_copies_t copies;
  mpn_copies_init(&copies, s);
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = ops[i];
    if (op->stream != s || op->kind != MPN_OP_PUT_SIGNAL || mpn_rma_over_ucx(op->comm, op->peer)) continue;
    int reach = mpn_transport_kernel_reach(op->comm, op->peer);
    MPN_CHECK(mpn_copies_add(&copies, puts[i].dst, op->buf, op->bytes, reach));
  }
  MPN_CHECK(mpn_copies_flush(&copies));
  cudaEvent_t used = NULL;
  for (int i = 0; i < n; i++) {
    if (ops[i]->stream != s || !puts[i].imported) continue;
    puts[i].imported = 0;
    int dev = ops[i]->comm->cuda_dev;
    if (graph) {
      mpn_graph_holds_add_import(&launch_holds, s, dev, &puts[i].ref);
      continue;
    }
    cudaError_t err = cudaSuccess; /* the record's: mpn_event_of_stream forgets its own failures */
    if (used == NULL &&
        (mpn_event_of_stream(s, dev, &used) != ncclSuccess || (err = cudaEventRecord(used, s)) != cudaSuccess)) {
      mpn_cuda_forget(err);
      used = NULL; /* the import is pinned instead */
    }
    mpn_ipc_mark_used(&puts[i].ref, used, 0);
  }
  return ncclSuccess;
}

/*
 * Signals captured in a CUDA graph cannot carry a running count (a replay
 * repeats the same values), so each captured signal from A to B has a flag
 * pair of its own in their pair file, the n-th captured signal on a context
 * matching the n-th signal B's captured waits count on it: A waits until
 * its previous replay's signal was seen ("busy" back to 0), marks "busy",
 * and sets "signal"; B waits for "signal", clears it, then clears "busy".
 * A context's slots serve its signals in turn; within a host a slot serves
 * again once both sides' graphs that captured its last signal are destroyed
 * (ncclGroupEnd's checks waited for that: check.c), and each launch notes
 * what its captures took for them to give back (launch_holds, attached at
 * the launch's end: p2p/graphs.h).  Over UCX, where each side keeps its own
 * words, a slot serves again once this side's graphs are destroyed and, on
 * the sending side, the peer took the last replay's signal (ucx/winstage.c).
 */

/* Takes the next graph slot of (peer, ctx) for a captured signal (send) or
 * a count of a captured wait, and returns its number (the slot is
 * mpn_rma_graph_slot of it); pair: the pair it lives in, NULL over UCX.
 * ncclGroupEnd's checks found it free (check.c). */
static uint64_t graph_slot(struct ncclComm* comm, int peer, int ctx, int send, mpn_pair_t* pair, cudaStream_t s,
                           unsigned long long capture) {
  size_t pc = mpn_rma_pc(comm, peer, ctx);
  uint64_t* counter = send ? &comm->rma->graph_sent[pc] : &comm->rma->graph_expected[pc];
  uint64_t seq = ++*counter;
  int slot = (int)mpn_rma_graph_slot(comm, ctx, seq);
  if (pair == NULL) {
#ifdef HAVE_UCX
    mpn_ucx_rma_graph_take(comm, &launch_holds, s, peer, slot, seq, send, capture);
#endif
    return seq;
  }
  int side = send ? MPN_SIDE_SEND : MPN_SIDE_RECV;
  __atomic_store_n(&pair->mem->rma_graph_capture[slot][side], (uint64_t)capture, __ATOMIC_RELEASE);
  mpn_graph_holds_add(&launch_holds, s, comm->cuda_dev, pair, MPN_GRAPH_RMA, (uint32_t)slot, seq, side, NULL);
  return seq;
}

/* Where a stream's flag operations go: a memop batch, or the flag kernel's
 * table (its writes come before its waits: signals are added first). */
typedef struct {
  mpn_memops_t* b;
  mpn_sync_t* k;
  uint64_t escape; /* the kernel's: the aborted word of the pair the next waits are on (cuda/sync.h), or 0 */
} sink_t;

static ncclResult_t sink_add(sink_t* to, CUdeviceptr addr, uint64_t value, int kind) {
  if (to->b) return mpn_memops_add(to->b, addr, value, kind);
  /* Several signals to one peer and context: their counter takes the last
   * count once (the kernel's first writes are unordered). */
  if (kind == MPN_MEMOP_WRITE && mpn_sync_raise(to->k, addr, value)) return ncclSuccess;
  int part = kind == MPN_MEMOP_WRITE ? MPN_SYNC_FIRST : MPN_SYNC_WAIT;
  uint32_t escape = part == MPN_SYNC_WAIT ? mpn_sync_escape(to->k, to->escape) : 0;
  if (!mpn_sync_push(to->k, 0, part, (mpn_sync_flag_t){addr, value, (uint32_t)kind, escape}))
    return mpn_error_set(NULL, ncclInternalError, "a signal after a wait in one flag kernel");
  return ncclSuccess;
}

/*
 * A signal stores the sender's running count, so two signals to one peer
 * and context from different streams, which the GPU runs in no order, could
 * leave the lower count last: a wait for the higher would hang, or pass
 * before the puts of the lower.  A signal counted on another stream than the
 * one before it therefore first waits for the counter to hold the previous
 * count (on one stream the order is the stream's; streams are told apart
 * by mpn_cuda_stream_id).  NCCL's signals are atomic additions, but its
 * launches of one communicator wait for one another whatever the stream,
 * so across launches this adds no dependency NCCL does not have (within a
 * group, and between ranks of one process under MPS: docs/RMA.md).
 */
static int signal_after_other_stream(const struct ncclComm* comm, const mpn_op_t* op, unsigned long long sid) {
  size_t pc = mpn_rma_pc(comm, op->peer, op->ctx);
  return comm->rma->sent[pc] > 0 && comm->rma->sent_stream[pc] != sid;
}

/* A signal of op on stream s, whose id (mpn_cuda_stream_id) is sid. */
static ncclResult_t add_signal(sink_t* to_sink, mpn_op_t* op, cudaStream_t s, unsigned long long sid, int graph,
                               int publish) {
  struct ncclComm* comm = op->comm;
  mpn_pair_t *to, *from;
  MPN_CHECK(mpn_p2p_pairs(comm, op->peer, &to, &from));
  if (!graph) {
    size_t pc = mpn_rma_pc(comm, op->peer, op->ctx);
    int order = signal_after_other_stream(comm, op, sid);
    if (order && to_sink->k) /* launches that need the order keep the memory operations (needs_order) */
      return mpn_error_set(NULL, ncclInternalError, "a signal after another stream's in a flag kernel");
    uint64_t count = ++comm->rma->sent[pc];
    comm->rma->sent_stream[pc] = sid;
    if (order) {
      CUdeviceptr addr;
      uint64_t value;
      mpn_rma_self_order(op, count, mpn_pair_signal(to, op->ctx), &addr, &value);
      MPN_CHECK(sink_add(to_sink, addr, value, MPN_MEMOP_WAIT_GEQ));
    }
    if (order && publish && mpn_rma_local(comm, op->peer, graph))
      MPN_CHECK(mpn_memops_flush(to_sink->b)); /* the event comes after the wait: it implies the earlier signal */
    if (publish && mpn_rma_local(comm, op->peer, graph)) mpn_rma_local_publish(to, op->ctx, count, s, comm->cuda_dev);
    if (to_sink->b && mpn_rma_self_elide(op, count)) return ncclSuccess; /* planned: self.c */
    return sink_add(to_sink, mpn_pair_signal(to, op->ctx), count, MPN_MEMOP_WRITE);
  }
  int slot = (int)mpn_rma_graph_slot(comm, op->ctx, graph_slot(comm, op->peer, op->ctx, 1, to, s, op->capture_id));
  CUdeviceptr busy = mpn_pair_dev(to, &to->mem->rma_graph_busy[slot]);
  to_sink->escape = mpn_pair_dev(to, &to->mem->aborted);
  MPN_CHECK(sink_add(to_sink, busy, 0, MPN_MEMOP_WAIT_EQ));
  MPN_CHECK(sink_add(to_sink, busy, 1, MPN_MEMOP_WRITE));
  return sink_add(to_sink, mpn_pair_dev(to, &to->mem->rma_graph_signal[slot]), 1, MPN_MEMOP_WRITE);
}

/* A wait for a rank of this process under MPS takes the sender's event
 * (local.c); a flag kernel polls the counter instead and gives the events
 * up to it back.  sid: the id of stream s, 0 where unknown; capture: the
 * op's CUDA capture (graph). */
static ncclResult_t add_wait(sink_t* to_sink, struct ncclComm* comm, const ncclWaitSignalDesc_t* d, cudaStream_t s,
                             unsigned long long sid, int graph, unsigned long long capture) {
  to_sink->escape = 0; /* (over UCX: no pair; within a host, the pair's word below) */
#ifdef HAVE_UCX
  if (mpn_rma_over_ucx(comm, d->peer)) mpn_ucx_peer_watch(comm, d->peer); /* (a peer that goes is then found) */
  if (mpn_rma_over_ucx(comm, d->peer) && !graph) { /* the counter the peer's atomic adds reach */
    uint64_t* expected = &comm->rma->expected[mpn_rma_pc(comm, d->peer, d->ctx)];
    *expected += (uint64_t)d->opCnt;
    return sink_add(to_sink, mpn_ucx_rma_counter(comm, d->peer, d->ctx), *expected, MPN_MEMOP_WAIT_GEQ);
  }
  for (int k = 0; mpn_rma_over_ucx(comm, d->peer) && k < d->opCnt; k++) { /* a slot per captured signal */
    int slot = (int)mpn_rma_graph_slot(comm, d->ctx, graph_slot(comm, d->peer, d->ctx, 0, NULL, s, capture));
    MPN_CHECK(sink_add(to_sink, mpn_ucx_rma_graph_flag(comm, d->peer, slot), 1, MPN_MEMOP_WAIT_GEQ));
  }
  if (mpn_rma_over_ucx(comm, d->peer)) return ncclSuccess;
#endif
  mpn_pair_t *to, *from;
  MPN_CHECK(mpn_p2p_pairs(comm, d->peer, &to, &from));
  to_sink->escape = mpn_pair_dev(from, &from->mem->aborted);
  if (!graph) {
    uint64_t* expected = &comm->rma->expected[mpn_rma_pc(comm, d->peer, d->ctx)];
    *expected += (uint64_t)d->opCnt;
    /* (a peer that ended normally, having sent them: its block may be gone) */
    if (mpn_rma_left_covers(comm, d->peer, d->ctx, *expected, NULL)) return ncclSuccess;
    if (to_sink->b && mpn_rma_self_wait_implied(comm, d, sid, *expected)) return ncclSuccess;
    if (mpn_rma_local(comm, d->peer, graph) && to_sink->k) mpn_rma_local_drop(from, d->ctx, *expected);
    else if (mpn_rma_local(comm, d->peer, graph) && mpn_rma_local_wait(from, d->ctx, *expected, s))
      return ncclSuccess;
    return sink_add(to_sink, mpn_pair_signal(from, d->ctx), *expected, MPN_MEMOP_WAIT_GEQ);
  }
  for (int k = 0; k < d->opCnt; k++) {
    int slot = (int)mpn_rma_graph_slot(comm, d->ctx, graph_slot(comm, d->peer, d->ctx, 0, from, s, capture));
    CUdeviceptr sig = mpn_pair_dev(from, &from->mem->rma_graph_signal[slot]);
    MPN_CHECK(sink_add(to_sink, sig, 1, MPN_MEMOP_WAIT_EQ));
    MPN_CHECK(sink_add(to_sink, sig, 0, MPN_MEMOP_WRITE));
    MPN_CHECK(sink_add(to_sink, mpn_pair_dev(from, &from->mem->rma_graph_busy[slot]), 0, MPN_MEMOP_WRITE));
  }
  return ncclSuccess;
}

#ifdef HAVE_UCX
_Static_assert(MPN_PAIR_RMA_GRAPH == MPN_UCX_GRAPH_SLOTS, "graph_slot numbers the UCX slots too");

/* A put or signal to a UCX peer captured in a graph: its slot, then its
 * stream work (ucx/winstage.c). */
static ncclResult_t ucx_graph_signal(const mpn_driver_t* drv, mpn_op_t* op) {
  struct ncclComm* comm = op->comm;
  uint64_t seq = graph_slot(comm, op->peer, op->ctx, 1, NULL, op->stream, op->capture_id);
  return mpn_ucx_rma_graph_signal(drv, &launch_holds, op, (int)mpn_rma_graph_slot(comm, op->ctx, seq), seq);
}
#endif

/* After the waits of stream s: the kernel that lands the puts signalled by
 * UCX peers, per wait op, from the counts its waits reached (ex[], in the
 * order the waits were added; captured: the first slot of each, ucx/winstage.c). */
static ncclResult_t land_ucx(const mpn_driver_t* drv, mpn_op_t** ops, int n, cudaStream_t s,
                             const uint64_t* ex, int graph) {
#ifdef HAVE_UCX
  int j = 0;
  for (int i = 0; i < n; i++) {
    mpn_op_t* op = ops[i];
    if (op->stream != s || op->kind != MPN_OP_WAIT_SIGNAL) continue;
    int any = 0;
    for (int d = 0; d < op->ndesc && !any; d++) any = mpn_rma_over_ucx(op->comm, op->descs[d].peer);
    if (!any) { /* the common case within a host: nothing to land, nothing allocated */
      j += op->ndesc;
      continue;
    }
    int k = 0, *peer = calloc((size_t)op->ndesc, sizeof(int)), *ctx = calloc((size_t)op->ndesc, sizeof(int)),
        *cnt = calloc((size_t)op->ndesc, sizeof(int));
    uint64_t* expected = calloc((size_t)op->ndesc, sizeof(uint64_t));
    ncclResult_t res = peer && ctx && cnt && expected ? ncclSuccess
                                                      : mpn_error_set(op->comm, ncclSystemError, "out of memory");
    for (int d = 0; d < op->ndesc; d++, j++)
      if (res == ncclSuccess && mpn_rma_over_ucx(op->comm, op->descs[d].peer)) {
        peer[k] = op->descs[d].peer, ctx[k] = op->descs[d].ctx, cnt[k] = op->descs[d].opCnt;
        expected[k++] = ex[j];
      }
    if (res == ncclSuccess && k)
      res = graph ? mpn_ucx_rma_graph_land(drv, &launch_holds, op->comm, peer, ctx, expected, cnt, k, s)
                  : mpn_ucx_rma_apply(op->comm, peer, ctx, expected, cnt, k, s);
    free(peer), free(ctx), free(cnt), free(expected);
    MPN_CHECK(res);
  }
#else
  (void)drv, (void)ops, (void)n, (void)s, (void)ex, (void)graph;
#endif
  return ncclSuccess;
}

/* Whether a wait of stream s is for a peer over UCX (whose landing copies
 * land_ucx enqueues after the waits). */
static int waits_over_ucx(mpn_op_t** ops, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++)
    for (int d = 0; ops[i]->stream == s && ops[i]->kind == MPN_OP_WAIT_SIGNAL && d < ops[i]->ndesc; d++)
      if (mpn_rma_over_ucx(ops[i]->comm, ops[i]->descs[d].peer)) return 1;
  return 0;
}

/* The signal writes (program order) of stream s, or (wait) its waits and
 * then the landing of puts from UCX peers, added to b (a batch on s), which
 * is flushed unless keep_open.  Puts and signals over UCX are not here
 * (ucx/staged.c). */
static ncclResult_t issue_signals(const mpn_driver_t* drv, mpn_op_t** ops, int n, cudaStream_t s,
                                  unsigned long long sid, int graph, int wait, mpn_memops_t* b, int keep_open,
                                  int ends) {
  sink_t to = {b, NULL, 0};
  int ndesc = 0;
  for (int i = 0; wait && i < n; i++)
    if (ops[i]->stream == s && ops[i]->kind == MPN_OP_WAIT_SIGNAL) ndesc += ops[i]->ndesc;
  uint64_t* ex = ndesc ? calloc((size_t)ndesc, sizeof(uint64_t)) : NULL;
  if (ndesc && ex == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  if (!wait && !graph) mpn_rma_self_plan(ops, n, s, sid); /* which writes to the rank itself to leave out */
  ncclResult_t res = ncclSuccess;
  for (int i = 0, j = 0; i < n && res == ncclSuccess; i++) {
    mpn_op_t* op = ops[i];
    if (op->stream != s || (op->kind == MPN_OP_WAIT_SIGNAL) != wait) continue;
    if (!wait && !mpn_rma_over_ucx(op->comm, op->peer)) res = add_signal(&to, op, s, sid, graph, 1);
#ifdef HAVE_UCX
    if (!wait && mpn_rma_over_ucx(op->comm, op->peer) && graph) { /* in program order with the batch's */
      res = mpn_memops_flush(b);
      if (res == ncclSuccess) res = ucx_graph_signal(drv, op);
    }
#endif
    for (int d = 0; wait && d < op->ndesc && res == ncclSuccess; d++, j++) {
      size_t pc = mpn_rma_pc(op->comm, op->descs[d].peer, op->descs[d].ctx);
      uint64_t first_slot = op->comm->rma->graph_expected[pc]; /* captured: where its slots start */
      res = add_wait(&to, op->comm, &op->descs[d], s, sid, graph, op->capture_id);
      ex[j] = graph ? first_slot : op->comm->rma->expected[pc];
    }
  }
  uint64_t mark = 0, value = 0;
  if (res == ncclSuccess && !keep_open && ends && !waits_over_ucx(ops, n, s)) {
    mpn_drain_carry(s, 1, &mark, &value); /* the finalize's mark, last in the batch (core/drain.h) */
    if (mark) res = mpn_memops_add(b, (CUdeviceptr)mark, value, MPN_MEMOP_WRITE);
  }
  if (res == ncclSuccess && !keep_open) res = mpn_memops_flush(b);
  if (mark && res != ncclSuccess) mpn_drain_uncarry(s);
  if (res == ncclSuccess && wait) res = land_ucx(drv, ops, n, s, ex, graph);
  free(ex);
  return res;
}

/*
 * A stream whose signals and waits are all with ranks whose kernels run
 * beside ours (or itself) writes and polls them in one kernel
 * (cuda/sync.h): a barrier's waits then cost one stream item, not one
 * hand-over per peer.  Not while capturing (the counts are running ones).
 */
static int peer_syncs(struct ncclComm* comm, int peer) {
  if (peer == comm->rank) return comm->cuda_dev >= 0;
  return comm->transport[peer] == MPN_TRANSPORT_IPC &&
         mpn_topo_kernels_concurrent(&comm->topo, comm->rank, peer);
}

/* first[i]: the first of the launch's ops on ops[i]'s stream, where the
 * stream's per-launch facts are kept (mpn_rma_launch); found once a launch. */
static void stream_firsts(mpn_op_t** ops, int n, int* first) {
  for (int i = 0; i < n; i++) {
    first[i] = i;
    for (int j = 0; j < i; j++)
      if (ops[j]->stream == ops[i]->stream) {
        first[i] = first[j];
        break;
      }
  }
}

/* Whether one of the launch's signals is to a peer within the host. */
static int host_signals(mpn_op_t** ops, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++)
    if (ops[i]->stream == s && ops[i]->kind != MPN_OP_WAIT_SIGNAL && !mpn_rma_over_ucx(ops[i]->comm, ops[i]->peer))
      return 1;
  return 0;
}

/* Whether a signal of the launch would be counted on another stream than the
 * signal before it to the same peer and context (add_signal): then no
 * stream of the launch takes the flag kernel, whose writes come before its
 * waits and in no order.  first: stream_firsts; sync and sids: per first
 * op of a stream, whether it is captured (bit 2; captured signals have
 * flags of their own) and its id. */
static int needs_order(mpn_op_t** ops, int n, const int* first, const char* sync, const unsigned long long* sids) {
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = ops[i];
    if (op->kind == MPN_OP_WAIT_SIGNAL || mpn_rma_over_ucx(op->comm, op->peer)) continue;
    int f = first[i];
    if (!(sync[f] & 4) && signal_after_other_stream(op->comm, op, sids[f])) return 1;
    for (int j = 0; j < i; j++)
      if (ops[j]->kind != MPN_OP_WAIT_SIGNAL && ops[j]->comm == op->comm && ops[j]->peer == op->peer &&
          ops[j]->ctx == op->ctx && ops[j]->stream != op->stream)
        return 1;
  }
  return 0;
}

static int stream_syncs(mpn_op_t** ops, int n, cudaStream_t s, int graph) {
  int flags = 0, waits = 0;
  if (graph || mpn_param_int(MPN_PARAM_KERNEL_SYNC) <= 0) return 0;
  for (int i = 0; i < n; i++) {
    mpn_op_t* op = ops[i];
    if (op->stream != s) continue;
    if (op->kind != MPN_OP_WAIT_SIGNAL && !peer_syncs(op->comm, op->peer)) return 0;
    flags += op->kind == MPN_OP_WAIT_SIGNAL ? 0 : 1;
    for (int d = 0; op->kind == MPN_OP_WAIT_SIGNAL && d < op->ndesc; d++, flags++, waits++) {
      int peer = op->descs[d].peer;
      if (!peer_syncs(op->comm, peer)) return 0;
      if (peer == op->comm->rank && mpn_rma_local(op->comm, peer, 0) && !mpn_rma_self_wait_syncs(ops, n, s, op, d))
        return 0;
    }
  }
  return waits >= mpn_param_int(MPN_PARAM_KERNEL_SYNC_WAITS) && flags <= MPN_SYNC_FLAGS;
}

/* Whether the signals with peer live in device memory of this GPU. */
static int peer_device_signals(struct ncclComm* comm, int peer) {
  mpn_pair_t *to, *from;
  return !mpn_rma_over_ucx(comm, peer) && mpn_topo_same_gpu(&comm->topo, comm->rank, peer) &&
         mpn_p2p_pairs(comm, peer, &to, &from) == ncclSuccess && to->dflags && from->dflags;
}

/* Whether every signal and wait of stream s is in device memory of its GPU:
 * then the kernel's fences need only device scope (the puts before it are
 * complete when it starts). */
static int device_scope(mpn_op_t** ops, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++) {
    mpn_op_t* op = ops[i];
    if (op->stream != s) continue;
    if (op->kind != MPN_OP_WAIT_SIGNAL && !peer_device_signals(op->comm, op->peer)) return 0;
    for (int d = 0; op->kind == MPN_OP_WAIT_SIGNAL && d < op->ndesc; d++)
      if (!peer_device_signals(op->comm, op->descs[d].peer)) return 0;
  }
  return 1;
}

/* Stream s's signals (program order; its own under MPS only with_self,
 * else see issue_self), then its waits, as one kernel; ends: the launch's
 * last item on s, which carries the finalize's mark (core/drain.h). */
static ncclResult_t issue_sync(const mpn_driver_t* drv, mpn_op_t** ops, int n, cudaStream_t s, unsigned long long sid,
                               int with_self, int ends) {
  mpn_sync_t k;
  mpn_sync_init(&k);
  k.device_scope = device_scope(ops, n, s);
  sink_t to = {NULL, &k, 0};
  for (int wait = 0; wait < 2; wait++)
    for (int i = 0; i < n; i++) {
      mpn_op_t* op = ops[i];
      if (op->stream != s || (op->kind == MPN_OP_WAIT_SIGNAL) != wait) continue;
      if (!wait && (with_self || !mpn_rma_self_local(op))) /* else issued before (issue_self) */
        MPN_CHECK(add_signal(&to, op, s, sid, 0, 0));
      for (int d = 0; wait && d < op->ndesc; d++) MPN_CHECK(add_wait(&to, op->comm, &op->descs[d], s, sid, 0, 0));
    }
  if (!mpn_sync_nflags(&k)) return ncclSuccess;
  return mpn_drain_sync_issue(drv, &k, s, 1, ends);
}

/* A sync stream's signals to its own rank under MPS, with the first pass's
 * other signals: memory writes whose events are published right there
 * (local.c), as the memop path does, not after the kernel's waits. */
static ncclResult_t issue_self(const mpn_driver_t* drv, mpn_op_t** ops, int n, cudaStream_t s,
                               unsigned long long sid) {
  mpn_memops_t b;
  mpn_memops_init(&b, drv, s);
  sink_t to = {&b, NULL, 0};
  for (int i = 0; i < n; i++)
    if (ops[i]->stream == s && ops[i]->kind != MPN_OP_WAIT_SIGNAL && mpn_rma_self_local(ops[i]))
      MPN_CHECK(add_signal(&to, ops[i], s, sid, 0, 1));
  return mpn_memops_flush(&b);
}

/*
 * Whether a launch's signals and waits can share one batch of memory
 * operations (one stream item, not two: the barrier's): all on one stream
 * (nothing of another stream can be behind its waits), not captured, and
 * with no peer over UCX nor of this process under MPS (waits for those are
 * event waits or landings, which must come after the flushed signals).  And
 * all of it fits one batch (a signal may add a wait: add_signal), so that
 * the batch is never issued in part: should adding a wait fail, its signals
 * alone still go out (mpn_rma_launch).
 */
static int one_batch(mpn_op_t** ops, int n, const char* sync) {
  if (n == 0 || (sync[0] & 4)) return 0;
  size_t items = 0;
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = ops[i];
    items += op->kind == MPN_OP_WAIT_SIGNAL ? (size_t)op->ndesc : 2;
    if (op->stream != ops[0]->stream) return 0;
    if (op->kind != MPN_OP_WAIT_SIGNAL &&
        (mpn_rma_over_ucx(op->comm, op->peer) || mpn_rma_local(op->comm, op->peer, 0)))
      return 0;
    for (int d = 0; op->kind == MPN_OP_WAIT_SIGNAL && d < op->ndesc; d++)
      if (mpn_rma_over_ucx(op->comm, op->descs[d].peer) || mpn_rma_local(op->comm, op->descs[d].peer, 0)) return 0;
  }
  return items < MPN_MEMOPS_MAX;
}

/* One launch's operations and what is decided about them before issue. */
typedef struct {
  int n;
  mpn_op_t** ops; /* in program order; all of them, read past a failure too */
  put_t* puts;    /* per op: a put's destination */
  /* Per first op of a stream: its signals and waits in a kernel (1), its
   * signals to its own rank too (2); bit 2: captured. */
  char* sync;
  unsigned long long* sids; /* per first op of a stream: its id */
  int* first;               /* stream_firsts */
  mpn_op_t** net;           /* puts and signals over UCX, in program order */
  int nnet;
  int current; /* the device now current (mpn_cuda_switch_device) */
} launch_t;

static void launch_free(launch_t* l) {
  free(l->ops);
  free(l->puts);
  free(l->sync);
  free(l->sids);
  free(l->first);
  free(l->net);
}

static ncclResult_t launch_alloc(launch_t* l, mpn_op_t* list) {
  memset(l, 0, sizeof(*l));
  for (mpn_op_t* op = list; op; op = op->next) l->n++;
  size_t n = (size_t)l->n;
  l->ops = calloc(n, sizeof(*l->ops));
  l->puts = calloc(n, sizeof(*l->puts));
  l->sync = calloc(n, 1);
  l->sids = calloc(n, sizeof(*l->sids));
  l->first = calloc(n, sizeof(*l->first));
  if (l->ops == NULL || l->puts == NULL || l->sync == NULL || l->sids == NULL || l->first == NULL) {
    launch_free(l);
    return mpn_error_set(NULL, ncclSystemError, "out of memory");
  }
  int i = 0;
  for (mpn_op_t* op = list; op; op = op->next) l->ops[i++] = op;
  return ncclSuccess;
}

/* Every put within the host's destination: the peer's window mapped here. */
static ncclResult_t resolve_puts(launch_t* l) {
  for (int i = 0; i < l->n; i++) {
    mpn_op_t* op = l->ops[i];
    if (op->kind != MPN_OP_PUT_SIGNAL || op->bytes == 0 || mpn_rma_over_ucx(op->comm, op->peer)) continue;
    mpn_cuda_switch_device(&l->current, op->comm->cuda_dev);
    void* base = NULL;
    ncclResult_t res = mpn_win_peer_base(op->win, op->peer, &base, &l->puts[i].ref, &l->puts[i].imported);
    if (res != ncclSuccess) {
      char why[256];
      snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
      return mpn_error_set(op->comm, res, "ncclPutSignal to rank %d: %s", op->peer, why);
    }
    l->puts[i].dst = (char*)base + op->offset;
  }
  return ncclSuccess;
}

/* Calls fn(l, op, peer, arg) for every peer within the host that op
 * signals (its peer) or waits for (each of its descriptors' peers), in
 * order; stops at and returns fn's first failure. */
static ncclResult_t for_host_peers(launch_t* l, mpn_op_t* op, ncclResult_t (*fn)(launch_t*, mpn_op_t*, int, void*),
                                   void* arg) {
  int waits = op->kind == MPN_OP_WAIT_SIGNAL;
  for (int d = 0; d < (waits ? op->ndesc : 1); d++) {
    int peer = waits ? op->descs[d].peer : op->peer;
    if (!mpn_rma_over_ucx(op->comm, peer)) MPN_CHECK(fn(l, op, peer, arg));
  }
  return ncclSuccess;
}

/* for_host_peers' work in resolve_pairs: the pair mapped (arg unused). */
static ncclResult_t map_pair(launch_t* l, mpn_op_t* op, int peer, void* arg) {
  (void)arg;
  mpn_cuda_switch_device(&l->current, op->comm->cuda_dev);
  mpn_pair_t *to, *from;
  return mpn_p2p_pairs(op->comm, peer, &to, &from);
}

/* The pair of every peer within the host the launch signals or waits for,
 * mapped before anything is issued (a first mapping opens a file and may
 * import device memory, and can fail): a failure then leaves no signal of
 * the launch issued and others not, and its peers are told. */
static ncclResult_t resolve_pairs(launch_t* l) {
  for (int i = 0; i < l->n; i++) MPN_CHECK(for_host_peers(l, l->ops[i], map_pair, NULL));
  return ncclSuccess;
}

/* for_host_peers' work in tell_peers_failed: the peer told through its
 * pair why (arg), unless it is this rank or its pair is not there. */
static ncclResult_t tell_peer_failed(launch_t* l, mpn_op_t* op, int peer, void* arg) {
  (void)l;
  mpn_pair_t *to = NULL, *from = NULL;
  if (peer == op->comm->rank || mpn_p2p_pairs(op->comm, peer, &to, &from) != ncclSuccess) return ncclSuccess;
  char text[512];
  snprintf(text, sizeof(text),
           "rank %d could not issue a group of one-sided calls with rank %d (%s): not every signal of that "
           "group went, nor every wait; abort the communicator",
           op->comm->rank, peer, (const char*)arg);
  if (op->kind == MPN_OP_WAIT_SIGNAL)
    mpn_pair_report(from, MPN_SIDE_SEND, ncclRemoteError, text);
  else
    mpn_pair_report(to, MPN_SIDE_RECV, ncclRemoteError, text);
  return ncclSuccess;
}

/* A launch that issued nothing (a pair or a put's destination could not be
 * mapped) or not all (CUDA refused an operation): its peers within the host
 * would wait for its signals, or it for theirs, unaware.  Each is told
 * through its pair, as for a refused send or receive, and so is this
 * communicator (ncclCommGetAsyncError): the signal numbering with them is
 * out of step, and both must abort. */
static void tell_peers_failed(launch_t* l, ncclResult_t res) {
  char why[256];
  snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
  for (int i = 0; i < l->n; i++) {
    for_host_peers(l, l->ops[i], tell_peer_failed, why); /* (never fails) */
    mpn_comm_fail_async(l->ops[i]->comm, res, "%s", why);
  }
  mpn_error_set(NULL, res, "%s", why); /* (the text returned is the cause) */
}

/* The puts and signals over UCX, numbered in program order (none within a
 * host; a captured one uses slots, not counts: issue_signals). */
static ncclResult_t number_net(launch_t* l, ncclResult_t res) {
  int ucx = 0;
  for (int i = 0; i < l->n; i++)
    ucx += l->ops[i]->kind != MPN_OP_WAIT_SIGNAL && mpn_rma_over_ucx(l->ops[i]->comm, l->ops[i]->peer);
  if (ucx == 0) return res;
  l->net = calloc((size_t)ucx, sizeof(*l->net));
  if (l->net == NULL) return res == ncclSuccess ? mpn_error_set(NULL, ncclSystemError, "out of memory") : res;
  for (int i = 0; i < l->n && res == ncclSuccess; i++) {
    mpn_op_t* op = l->ops[i];
    if (op->kind == MPN_OP_WAIT_SIGNAL || !mpn_rma_over_ucx(op->comm, op->peer) || op->capturing) continue;
    op->seq = ++op->comm->rma->sent[mpn_rma_pc(op->comm, op->peer, op->ctx)];
    l->net[l->nnet++] = op;
  }
  return res;
}

/* Per stream, once: whether it is being captured (bit 2 of sync[i], at its
 * first op; ncclGroupEnd's capture_check asked) and, if not and it signals
 * within the host, its id (never asked of a captured stream: the query
 * would end the capture). */
static void mark_streams(launch_t* l) {
  stream_firsts(l->ops, l->n, l->first);
  for (int i = 0; i < l->n; i++) {
    if (l->first[i] != i) continue;
    mpn_cuda_switch_device(&l->current, l->ops[i]->comm->cuda_dev);
    l->sync[i] = l->ops[i]->capturing ? 4 : 0;
    if (!l->sync[i] && host_signals(l->ops, l->n, l->ops[i]->stream)) l->sids[i] = mpn_op_stream_id(l->ops[i]);
  }
}

/* Stream i's part of pass `pass` (issue_streams); open: its batch of memory
 * operations, kept from pass 0 to pass 2 when merged. */
static ncclResult_t issue_stream(launch_t* l, const mpn_driver_t* drv, int i, int pass, int ordered, int merged,
                                 mpn_memops_t* open) {
  mpn_op_t** ops = l->ops;
  int n = l->n;
  cudaStream_t s = ops[i]->stream;
  int graph = l->sync[i] >> 2;
  int last = l->nnet == 0; /* no lane joins after the stream's last item */
  /* Decided once per stream, in the first pass: the counts it reads change
   * as signals are issued, and the passes must agree. */
  if (pass == 0) {
    l->sync[i] |= !ordered && stream_syncs(ops, n, s, graph) ? 1 + mpn_rma_self_consumed(ops, n, s) : 0;
    ncclResult_t res = issue_puts(ops, l->puts, n, s, graph);
    if (res != ncclSuccess) return res;
  }
  int kernel = l->sync[i] & 3;
  if (pass == 0 && kernel) return kernel != 2 ? issue_self(drv, ops, n, s, l->sids[i]) : ncclSuccess;
  if (pass == 0) {
    mpn_memops_init(open, drv, s);
    return issue_signals(drv, ops, n, s, l->sids[i], graph, 0, open, merged, 0);
  }
  if (pass == 1) return kernel ? issue_sync(drv, ops, n, s, l->sids[i], kernel == 2, last) : ncclSuccess;
  if (kernel) return ncclSuccess;
  unsigned nsig = merged ? open->n : 0; /* the signals still in the batch */
  if (!merged) mpn_memops_init(open, drv, s);
  ncclResult_t res = issue_signals(drv, ops, n, s, l->sids[i], graph, 1, open, 0, last);
  if (res != ncclSuccess && merged) { /* the waits failed: the peers still get the signals */
    open->n = nsig;
    mpn_keep(&res, mpn_memops_flush(open));
  }
  return res;
}

/* Every stream's puts and signals, then the kernels of the streams that
 * have one (signals and waits), then every other stream's waits: a thread
 * driving several ranks never waits (on the host, rma/local.c) for itself,
 * and no kernel's signals queue behind another stream's waits. */
static ncclResult_t issue_streams(launch_t* l, const mpn_driver_t* drv) {
  int ordered = mpn_param_int(MPN_PARAM_KERNEL_SYNC) > 0 && needs_order(l->ops, l->n, l->first, l->sync, l->sids);
  int merged = one_batch(l->ops, l->n, l->sync);
  mpn_memops_t open; /* a stream's signals, then (merged: still open) its waits */
  for (int pass = 0; pass < 3; pass++)
    for (int i = 0; i < l->n; i++) {
      if (l->first[i] != i) continue;
      mpn_cuda_switch_device(&l->current, l->ops[i]->comm->cuda_dev);
      ncclResult_t res = issue_stream(l, drv, i, pass, ordered, merged, &open);
      if (res != ncclSuccess) return res;
    }
  return ncclSuccess;
}

ncclResult_t mpn_rma_launch(mpn_op_t* list, int dev) {
  launch_t l;
  MPN_CHECK(launch_alloc(&l, list));
  l.current = dev;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < l.n && res == ncclSuccess; i++) {
    mpn_rma_t* rma; /* the ops passed mpn_rma_check */
    res = mpn_rma_state(l.ops[i]->comm, &rma);
  }
  if (res == ncclSuccess) {
    res = resolve_pairs(&l);
    if (res == ncclSuccess) res = resolve_puts(&l);
    if (res != ncclSuccess) tell_peers_failed(&l, res);
  }
  const mpn_driver_t* drv = NULL;
  if (res == ncclSuccess) res = mpn_driver_get(&drv);
  res = number_net(&l, res);
#ifdef HAVE_UCX
  /* The lanes' work before the streams' waits (ucx/staged.c), past a
   * failure too: the peers expect the numbered signals. */
  ncclResult_t forked = l.nnet && res == ncclSuccess ? mpn_ucx_staged_fork(l.net, l.nnet) : ncclSuccess;
  ncclResult_t staged = l.nnet ? mpn_ucx_staged_launch(l.net, l.nnet) : ncclSuccess;
#else
  ncclResult_t forked = ncclSuccess, staged = ncclSuccess; /* refused by the checks */
#endif
  if (res == ncclSuccess) mark_streams(&l);
  if (res == ncclSuccess) {
    res = issue_streams(&l, drv);
    if (res != ncclSuccess) tell_peers_failed(&l, res); /* some of its signals or waits went, some not */
  }
#ifdef HAVE_UCX
  if (l.nnet) mpn_keep(&staged, mpn_ucx_staged_join(l.net, l.nnet));
#endif
  if (res == ncclSuccess) res = forked;
  if (res == ncclSuccess) res = staged;
  for (int i = 0; i < l.n; i++) /* imports handed out but not issued: never known idle */
    if (l.puts[i].imported) mpn_ipc_mark_used(&l.puts[i].ref, NULL, 1);
  mpn_graph_holds_attach(launch_holds, l.n ? l.ops[0]->comm->rank : -1, &l.current); /* captures' notes */
  launch_holds = NULL;
  if (dev >= 0) mpn_cuda_switch_device(&l.current, dev);
  launch_free(&l);
  return res;
}
