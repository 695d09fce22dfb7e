/*
 * sync_plan.c - a launch's halves as one flag kernel (cuda/sync.h): which
 * streams' halves fit one, and the kernel's table of flags and copies built
 * from the launch's plans, in the order issue.c's memory operations take.
 */
#include <stdint.h>

#include "core/comm.h"
#include "core/debug.h"
#include "core/drain.h"
#include "core/param.h"
#include "cuda/sync.h"
#include "p2p/eager.h"
#include "p2p/graphs.h"
#include "p2p/report.h"
#include "p2p/sync_plan.h"
#include "transport.h"

/*
 * Streams whose every message is with a rank whose kernels run beside ours
 * (plan.spin) can do a half as one kernel (cuda/sync.h) when its flags and
 * copies fit: the front writes "ready", polls the peers' "ready", copies
 * and writes "done"; the back polls "done", copies eager messages out and
 * frees their inbox slots.  Same order as the memory
 * operations, one stream item instead of three to six.  A half takes the
 * kernel when it has eager messages (their copies need a kernel anyway) or
 * several waits (MPINCCL_KERNEL_SYNC_WAITS; with one or two, memory
 * operations were faster).  A launch with a single stream does both halves
 * in one kernel whenever they fit, whatever its waits: one stream item
 * instead of four (H200, MPS: 32 KiB sendrecv 7.7 us against 10.7 us), and
 * nothing else of the launch can be waiting behind it.
 */

/*
 * A launch's stream work in three phases (rounds of the kernel): 0, the
 * "ready" writes (first writes of the table) and the eager sends, which wait
 * for nothing (copy into the inbox, "done"); 1, the two-hop messages this
 * rank moves (wait for "ready", copy, "done"); 2, the back half (wait for
 * "done", copy eager messages out, free their slots).  Phases 0 and 1 are
 * the front half.
 */
static const int half_phases[2][2] = {{0, 1}, {2, 2}}; /* first and last phase of each half */

/* The flag operation of plan p in part (MPN_SYNC_FIRST, _WAIT, _LAST) of
 * phase; returns how many (at most one). */
static int plan_part(const plan_t* p, int phase, int part, mpn_sync_flag_t* f) {
  int send = p->op->kind == MPN_OP_SEND, first_side = p->role == MPN_POST_FIRST;
  int done = -1, kind = MPN_MEMOP_WRITE;
  if (phase == 0 && part == MPN_SYNC_FIRST && !p->eager && first_side) done = 0;
  if (phase == 0 && part == MPN_SYNC_LAST && p->eager && send) done = 1;
  if (phase == 1 && part == MPN_SYNC_WAIT && !p->eager && !first_side) done = 0, kind = MPN_MEMOP_WAIT_GEQ;
  if (phase == 1 && part == MPN_SYNC_LAST && !p->eager && !first_side) done = 1;
  if (phase == 2 && part == MPN_SYNC_WAIT && (p->eager ? !send : first_side)) done = 1, kind = MPN_MEMOP_WAIT_GEQ;
  if (p->eager == MPN_EAGER_GRAPH && phase == 0 && part == MPN_SYNC_WAIT && send) { /* the last replay's copy out */
    *f = (mpn_sync_flag_t){plan_graph_full(p), MPN_PAIR_GRAPH_FREE, MPN_MEMOP_WAIT_NOR, 0};
    return 1;
  }
  if (phase == 2 && part == MPN_SYNC_LAST && p->eager && !send) { /* the slot is free again */
    if (p->eager == MPN_EAGER_GRAPH) return 0; /* its wait's clear, after the round's copies, frees it */
    *f = (mpn_sync_flag_t){mpn_eager_freed(p->pair, p->eager, p->eager_n), p->eager_n + 1, MPN_MEMOP_WRITE, 0};
    return 1;
  }
  if (done < 0) return 0;
  if (p->graph) { /* 0 -> 1 -> 0 on every replay, as plan_flag's; the waiter clears */
    kind = kind == MPN_MEMOP_WRITE ? MPN_MEMOP_WRITE : MPN_MEMOP_WAIT_GEQ_CLEAR;
    *f = (mpn_sync_flag_t){mpn_pair_flag(p->pair, p->seq, 1, done), 1, (uint32_t)kind, 0};
    return 1;
  }
  *f = (mpn_sync_flag_t){mpn_pair_flag(p->pair, p->seq, 0, done), p->seq, (uint32_t)kind, 0};
  return 1;
}

/* The copy of plan p in phase: 0 when none. */
static int plan_copy(const plan_t* p, int phase, mpn_copy_t* c) {
  int send = p->op->kind == MPN_OP_SEND;
  if (p->eager) return ((phase == 0 && send) || (phase == 2 && !send)) && plan_eager_copy(p, c);
  if (phase != 1 || p->role != MPN_POST_SECOND || !p->move || p->op->bytes == 0) return 0;
  *c = (mpn_copy_t){p->src, p->dst, p->op->bytes, NULL, NULL};
  return 1;
}

/* What halves half0..half1 of stream s would put in the kernel. */
typedef struct {
  int ok; /* every message of the stream may be polled for by a kernel */
  int flags, copies, waits, eager;
  size_t bytes;
  int graph; /* captured: one block only for few bytes (sync_fits), never launched early */
} sync_count_t;

/*
 * A message of a rank to itself whose other side is in this launch on the
 * same stream (p2p.c, self_same_stream): both sides' flags are in one
 * kernel, written before they are polled, so the kernel waits for nothing
 * outside itself (a halo or an all-to-all whose decomposition wraps onto
 * the rank itself would otherwise keep every message of the stream out of
 * the kernel).  Where the rank's GPU is not time-sliced, as for any kernel.
 */
static int self_in_kernel(const plan_t* p) {
  const struct ncclComm* comm = p->op->comm;
  const plan_t* other = p->self_other;
  return other && other->posted && !comm->topo.gpu_sliced[comm->rank] && mpn_param_int(MPN_PARAM_KERNEL_SYNC) > 0;
}

static sync_count_t sync_count(const plan_t* plans, int n, cudaStream_t s, int half0, int half1) {
  sync_count_t c = {1, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n; i++) {
    const plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s) continue;
    c.graph |= p->graph;
    if ((!p->spin && !self_in_kernel(p)) || p->stage || (half0 == 0 && (plan_gated(p) || p->step > 0)))
      c.ok = 0; /* issue_front */
    for (int phase = half_phases[half0][0]; phase <= half_phases[half1][1]; phase++) {
      mpn_sync_flag_t f;
      for (int part = MPN_SYNC_FIRST; part <= MPN_SYNC_LAST; part++) c.flags += plan_part(p, phase, part, &f);
      c.waits += plan_part(p, phase, MPN_SYNC_WAIT, &f);
      c.eager += p->eager && (plan_part(p, phase, MPN_SYNC_LAST, &f) || /* its "done" or its slot's word, */
                              (p->eager == MPN_EAGER_GRAPH && phase == 2 && p->op->kind == MPN_OP_RECV));
      /* (the last: a graph slot's inbox copied out, whose flag its wait clears) */
      mpn_copy_t copy;
      if (!plan_copy(p, phase, &copy)) continue;
      if (!mpn_transport_kernel_reach(p->op->comm, p->op->peer)) c.ok = 0; /* the engine's */
      c.bytes += copy.bytes;
      c.copies++;
    }
  }
  return c;
}

/* Copies a kernel of one block takes (launches of several streams, see
 * mpn_sync_grid_take, or one that got no blocks to spare); past this the
 * copy engine is faster (the bound before the kernel had several blocks). */
#define ONE_BLOCK_BYTES ((size_t)524288)

/* Copies a captured launch's kernel of one block takes (about 16 GB/s): a
 * few large copies cost more than the stream items it saves, while many
 * messages save many (H200, MPS, captured: sendrecv of 8 B 5.9 us by the
 * kernel against 11.3 us by memory operations, of 256 KiB 19.1 against
 * 11.1 us, of 1 MiB 63.4 against 11.6; an 8-rank halo of 16 KiB faces, 26
 * copies and 416 KiB per rank, 245-405 against 327-714 us).  So up to
 * GRAPH_KERNEL_BYTES, or up to ONE_BLOCK_BYTES from GRAPH_KERNEL_MANY
 * copies; a captured kernel of several blocks takes what any kernel does. */
#define GRAPH_KERNEL_BYTES ((size_t)65536)
#define GRAPH_KERNEL_MANY 8

static int graph_one_block_fits(size_t bytes, int copies) {
  return bytes <= (copies >= GRAPH_KERNEL_MANY ? ONE_BLOCK_BYTES : GRAPH_KERNEL_BYTES);
}

/* Whether c fits a kernel; grid: of several blocks, if the pool has them
 * (a launch that gets one block checks again: issue_sync). */
static int sync_fits(const sync_count_t* c, int grid) {
  size_t most = (size_t)mpn_param_int(MPN_PARAM_KERNEL_SYNC);
  if (!grid && most > ONE_BLOCK_BYTES) most = ONE_BLOCK_BYTES;
  if (c->graph && !grid && !graph_one_block_fits(c->bytes, c->copies)) return 0;
  return c->ok && c->flags <= MPN_SYNC_FLAGS && c->copies <= MPN_SYNC_COPIES && c->bytes <= most;
}

static int sync_wanted(const sync_count_t* c) {
  return c->eager > 0 || c->waits >= mpn_param_int(MPN_PARAM_KERNEL_SYNC_WAITS);
}

/* Adds phase's operations of stream s to round of k (in the table's order);
 * 0 if the table refused one (sync_fits rules that out). */
static int sync_fill(mpn_sync_t* k, plan_t* plans, int n, cudaStream_t s, int phase, int round) {
  int ok = 1;
  for (int part = MPN_SYNC_FIRST; part <= MPN_SYNC_LAST; part++)
    for (int i = 0; i < n; i++) {
      plan_t* p = &plans[i];
      mpn_sync_flag_t f;
      mpn_copy_t c;
      if (!p->posted || p->op->stream != s) continue;
      if (part == MPN_SYNC_LAST && plan_copy(p, phase, &c)) ok &= mpn_sync_push_copy(k, round, c);
      if (!plan_part(p, phase, part, &f)) continue;
      if (f.kind != MPN_MEMOP_WRITE && p->pair) /* the pair's aborted word lets it go (cuda/sync.h) */
        f.escape = mpn_sync_escape(k, mpn_pair_dev(p->pair, &p->pair->mem->aborted));
      ok &= mpn_sync_push(k, round, part, f);
    }
  return ok;
}

/* Whether every flag and buffer of stream s's messages is in memory of the
 * stream's GPU (flags in device memory, peers on the same GPU): then the
 * kernel's fences need only device scope.  The words that free inbox slots
 * are in host memory, but a host reads them only to let a later message
 * overwrite the slot, and the kernel's reads of the slot are done by then. */
static int device_scope(const plan_t* plans, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++) {
    const plan_t* p = &plans[i];
    const struct ncclComm* comm = p->op->comm;
    if (p->posted && p->op->stream == s &&
        (p->pair->dflags == 0 || !mpn_topo_same_gpu(&comm->topo, comm->rank, p->op->peer)))
      return 0;
  }
  return 1;
}

/* The first message of stream s's that is posted, or NULL. */
static const plan_t* first_posted(const plan_t* plans, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++)
    if (plans[i].posted && plans[i].op->stream == s) return &plans[i];
  return NULL;
}

/* Hangs the counters of captured kernel k (several blocks) on the graph
 * that stream s is capturing: they serve other launches once it is gone
 * (each replay leaves them at 0 for the next). */
static void grid_hold(const mpn_sync_t* k, const struct ncclComm* comm, cudaStream_t s) {
  void* pool;
  uint32_t slot;
  mpn_sync_grid_slot(k, &pool, &slot);
  mpn_graph_holds_t* h = NULL;
  mpn_graph_holds_add_to(&h, s, comm->cuda_dev, mpn_sync_grid_gone, pool, slot, 1, 0);
  int current = comm->cuda_dev; /* (issue_sync runs on the stream's device) */
  mpn_graph_holds_attach(h, comm->rank, &current);
}

/* The kernel's copies could not all be enqueued (cuda/syncs.c): both sides
 * of every message of stream s whose data the table moved in phases
 * [first, last] learn that it may be missing. */
static void copies_lost(plan_t* plans, int n, cudaStream_t s, int first, int last, ncclResult_t res) {
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    mpn_copy_t c;
    if (!p->posted || p->op->stream != s) continue;
    for (int phase = first; phase <= last; phase++)
      if (plan_copy(p, phase, &c)) {
        mpn_plan_report_copy_lost(p, res);
        break;
      }
  }
}

ncclResult_t mpn_p2p_sync_issue(const mpn_driver_t* drv, plan_t* plans, int n, cudaStream_t s, int half0, int half1,
                                int grid, int ends, int* issued) {
  mpn_sync_t k;
  mpn_sync_init(&k);
  k.device_scope = device_scope(plans, n, s);
  int first = half_phases[half0][0], ok = 1;
  for (int phase = first; phase <= half_phases[half1][1]; phase++)
    ok &= sync_fill(&k, plans, n, s, phase, phase - first);
  *issued = ok;
  if (!ok) {
    MPN_WARN("a flag kernel's table refused an operation: stream memory operations instead");
    return ncclSuccess;
  }
  const plan_t* p0 = first_posted(plans, n, s);
  if (mpn_sync_nflags(&k) == 0 || p0 == NULL) return ncclSuccess;
  k.captured = p0->graph; /* never launched early; its grid is held (all of s's messages are captured or none) */
  const struct ncclComm* comm = p0->op->comm;
  if (grid) mpn_sync_grid_take(comm->cuda_dev, comm->topo.n_same_gpu, &k);
  size_t bytes = mpn_sync_bytes(&k);
  if (k.grid.blocks == 1 &&
      (k.captured ? !graph_one_block_fits(bytes, mpn_sync_ncopies(&k)) : bytes > ONE_BLOCK_BYTES)) {
    *issued = 0; /* no counters free, or no blocks to spare: memory operations and the copy engines */
    return ncclSuccess;
  }
  ncclResult_t res = mpn_drain_sync_issue(drv, &k, s, 0, ends);
  if (k.copies_lost) copies_lost(plans, n, s, first, half_phases[half1][1], res);
  if (k.captured && k.grid.blocks > 1) grid_hold(&k, comm, s);
  if (half0 == 0) mpn_plan_imports_used(plans, n, s); /* an event record only: no memory of the comm */
  return res;
}

int mpn_p2p_sync_fits(const plan_t* plans, int n, cudaStream_t s, int half0, int half1, int grid, int if_wanted) {
  sync_count_t c = sync_count(plans, n, s, half0, half1);
  return (!if_wanted || sync_wanted(&c)) && sync_fits(&c, grid);
}
