/*
 * issue.c - turns a launch's posted messages into stream work: memory
 * operations on the pair flags in batches, one kernel for the small copies
 * (to and from any GPU the rank reaches), the copy engine for the others
 * (those to other GPUs beside one another on lanes), and CUDA events
 * between ranks of one process under MPS; or a half, or the whole launch, as
 * one flag kernel whose table sync_plan.c builds.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/drain.h"
#include "core/error.h"
#include "cuda/device.h"
#include "core/param.h"
#include "cuda/copies.h"
#include "cuda/lanes.h"
#include "transport.h"
#include "cuda/memop.h"
#include "cuda/event.h"
#include "p2p/eager.h"
#include "p2p/graphs.h"
#include "p2p/p2p.h"
#include "p2p/plan.h"
#include "p2p/report.h"
#include "p2p/sync_plan.h"

/*
 * One flag operation of a plan.  Messages not captured write their sequence number
 * and wait for at least it.  Graph messages write 1, wait for at least 1
 * (a release writes more: MPN_PAIR_GRAPH_RELEASED) and put the flag back
 * to 0 right after, so that the next replay starts from the same state: the
 * second side clears "ready" before it copies, the first clears "done" once
 * it has seen it.
 */
static ncclResult_t plan_flag(mpn_memops_t* b, const plan_t* p, int done, int wait) {
  CUdeviceptr flag = mpn_pair_flag(p->pair, p->seq, p->graph, done);
  if (!p->graph) return mpn_memops_add(b, flag, p->seq, wait ? MPN_MEMOP_WAIT_GEQ : MPN_MEMOP_WRITE);
  return mpn_memops_add(b, flag, 1, wait ? MPN_MEMOP_WAIT_GEQ_CLEAR : MPN_MEMOP_WRITE);
}

/* An eager send whose copy into the inbox could not be enqueued: its size
 * word becomes 0, so that the receiver copies nothing rather than what the
 * slot's previous message left there, and both sides learn of the loss. */
static void eager_send_lost(plan_t* p, mpn_memops_t* b) {
  mpn_memops_add(b, mpn_eager_size(p->pair, p->eager, p->eager_n), 0, MPN_MEMOP_WRITE);
  char text[160];
  snprintf(text, sizeof(text), "message %llu from rank %d to rank %d: its copy into the inbox failed; data lost",
           (unsigned long long)p->seq, p->op->comm->rank, p->op->peer);
  mpn_plan_report_both(p, ncclInternalError, text);
}

void mpn_plan_imports_used(plan_t* plans, int n, cudaStream_t s) {
  cudaEvent_t used = NULL;
  mpn_graph_holds_t* pins = NULL;
  int rank = -1;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->imported || p->op->stream != s) continue;
    if (p->graph) { /* held open until the graph is gone */
      mpn_graph_holds_add_import(&pins, s, p->op->comm->cuda_dev, &p->ref);
      rank = p->op->comm->rank;
      continue;
    }
    if (used == NULL && mpn_event_of_stream(s, p->op->comm->cuda_dev, &used) == ncclSuccess &&
        cudaEventRecord(used, s) != cudaSuccess) {
      cudaGetLastError();
      used = NULL;
    }
    mpn_ipc_mark_used(&p->ref, used, 0);
  }
  mpn_graph_holds_attach_here(pins, rank);
}

/*
 * The copies this rank moves on stream s: messages up to
 * MPINCCL_COPY_KERNEL_MAX bytes to or from a GPU the rank reaches go through
 * one kernel launch per MPN_COPY_BATCH of them, the others each through the
 * copy engine, those of LANE_MIN_BYTES or more to other GPUs on lanes.
 */

/* Copies at least this large to or from other GPUs go by the copy engine
 * beside one another (lanes.h). */
#define LANE_MIN_BYTES ((size_t)4 << 20)

static int copy_on_lane(const plan_t* p) {
  const struct ncclComm* comm = p->op->comm;
  return !p->graph && p->op->bytes >= LANE_MIN_BYTES && !mpn_topo_same_gpu(&comm->topo, comm->rank, p->op->peer);
}

/* p's copy by the copy engine on the fork's next stream. */
static ncclResult_t issue_on_lane(mpn_fork_t* fork, const plan_t* p) {
  cudaStream_t on;
  MPN_CHECK(mpn_fork_next(fork, &on));
  MPN_CUDA_CHECK(cudaMemcpyAsync(p->dst, p->src, p->op->bytes, cudaMemcpyDefault, on));
  return ncclSuccess;
}

/* Whether this side moves p in the given step of stream s (eager or not; in
 * chain, or any when chain < 0). */
static int moved_in(const plan_t* p, cudaStream_t s, int eager, int step, int chain) {
  return p->posted && p->move && p->op->stream == s && (p->eager != 0) == eager && p->step == step &&
         (chain < 0 || p->chain == chain);
}

/* The copies of stream s's plans of one step (of one chain's, chain >= 0:
 * issue_chains), issued on stream on. */
static ncclResult_t issue_copies(plan_t* plans, int n, cudaStream_t s, cudaStream_t on, int eager, int step,
                                 int chain) {
  ncclResult_t first = ncclSuccess;
  mpn_copies_t copies;
  mpn_copies_init(&copies, on);
  mpn_fork_t fork;
  int forking = 0;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!moved_in(p, s, eager, step, chain)) continue;
    mpn_copy_t c;
    if (p->eager) { /* receives copy out in the second half */
      if (p->op->kind == MPN_OP_SEND && plan_eager_copy(p, &c)) mpn_keep(&first, mpn_copies_add_kernel(&copies, &c));
      continue;
    }
    struct ncclComm* comm = p->op->comm;
    if (chain < 0 && copy_on_lane(p)) { /* chains use the lanes themselves */
      if (!forking) mpn_fork_init(&fork, s, comm->cuda_dev, mpn_p2p_lanes(comm));
      forking = 1;
      mpn_keep(&first, issue_on_lane(&fork, p));
      continue;
    }
    /* The kernel reaches the peer's GPU where the transport maps it. */
    int reach = mpn_transport_kernel_reach(comm, p->op->peer);
    mpn_keep(&first, mpn_copies_add(&copies, p->dst, p->src, p->op->bytes, reach));
  }
  mpn_keep(&first, mpn_copies_flush(&copies));
  if (forking) mpn_keep(&first, mpn_fork_join(&fork));
  return first;
}

/* A step's copies that could not all be enqueued (a launch or copy CUDA
 * refused): the "done" writes still come, so that nobody hangs, and both
 * sides of every message the step moves learn that its data may be missing
 * (ncclCommGetAsyncError), not only this side's ncclGroupEnd: the peer
 * would otherwise read its buffer as if it had arrived. */
static void copies_lost(plan_t* plans, int n, cudaStream_t s, int step, int chain, ncclResult_t res) {
  for (int i = 0; i < n; i++)
    if (moved_in(&plans[i], s, 0, step, chain)) mpn_plan_report_copy_lost(&plans[i], res);
}

/* Whether p is a posted eager message of kind (send or receive) on stream s. */
static int eager_on(const plan_t* p, cudaStream_t s, mpn_op_kind_t kind) {
  return p->posted && p->op->stream == s && p->eager && p->op->kind == kind;
}

/*
 * Ranks of one process under MPS.  A stream memory wait holds the hardware
 * queue it sits in, and an MPS client has few queues: the stream that would
 * write a flag can sit behind another thread's wait for it.  Messages
 * between ranks of one process therefore order their streams with events,
 * which only wait for work already enqueued.  Each side records an event
 * where it posts (describe); the second side makes its stream wait for the
 * first side's, moves the data, records a "done" event and publishes it in
 * the slot; the first side, on the host, waits for that publication (the
 * other rank is inside its own launch) and makes its stream wait for it.
 * The memory flags are still written, so a first side that waits longer than
 * MPINCCL_LOCAL_WAIT_US falls back to waiting for the flag, and marks the
 * slot so (DONE_GIVEN_UP): the second side, publishing late, then gives its
 * event back to the pool itself, as nobody will.  A launch issues every
 * stream's first half before any stream's second half, so one thread
 * driving several ranks never waits for itself.
 */
#define DONE_GIVEN_UP (1ull << 63) /* done_seq: the first side of that message stopped waiting */

static uint64_t done_given_up; /* how many first sides did so, in this process */

uint64_t mpn_p2p_done_given_up(void) { return __atomic_load_n(&done_given_up, __ATOMIC_RELAXED); }

static void publish_done(plan_t* p, cudaStream_t s) {
  cudaEvent_t ev = NULL;
  int dev = p->op->comm->cuda_dev;
  if (!mpn_event_mark(dev, s, &ev)) return; /* the first side falls back to the flag */
  mpn_slot_t* slot = mpn_pair_slot(p->pair, p->seq, p->graph);
  slot->done_event = (uint64_t)(uintptr_t)ev;
  slot->done_dev = dev;
  uint64_t was = __atomic_exchange_n(&slot->done_seq, p->seq, __ATOMIC_ACQ_REL);
  if (was == (p->seq | DONE_GIVEN_UP)) mpn_event_put(dev, ev); /* nobody will take it */
}

/* First side: the second side's "done" event, once published, or NULL. */
static cudaEvent_t await_done(const plan_t* p, int* dev) {
  mpn_slot_t* slot = mpn_pair_slot(p->pair, p->seq, p->graph);
  uint64_t deadline = mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_LOCAL_WAIT) * 1000;
  uint64_t seen;
  while ((seen = __atomic_load_n(&slot->done_seq, __ATOMIC_ACQUIRE)) != p->seq)
    if (mpn_clock_now_ns() > deadline && __atomic_compare_exchange_n(&slot->done_seq, &seen, p->seq | DONE_GIVEN_UP, 0,
                                                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      __atomic_add_fetch(&done_given_up, 1, __ATOMIC_RELAXED);
      MPN_INFO(MPN_SUBSYS_P2P, "message %llu with rank %d: no done event after %lld us; waiting "
               "for the flag", (unsigned long long)p->seq, p->op->peer,
               (long long)mpn_param_int(MPN_PARAM_LOCAL_WAIT));
      return NULL;
    } /* (else published meanwhile: seen is p->seq now) */
  *dev = slot->done_dev;
  return (cudaEvent_t)(uintptr_t)slot->done_event;
}

/* Whether this rank moves p's data by the two-hop handshake (its second side). */
static int moved_here(const plan_t* p) {
  return p->posted && p->role == MPN_POST_SECOND && !p->eager;
}

/* qsort order of assign_steps: by stream, then process of the peer, then
 * the launch of that process that posted the first side. */
static int step_order(const void* a, const void* b) {
  const plan_t *p = *(plan_t* const*)a, *q = *(plan_t* const*)b;
  uintptr_t k[2][3] = {{(uintptr_t)p->op->stream, p->peer_proc, p->peer_launch},
                       {(uintptr_t)q->op->stream, q->peer_proc, q->peer_launch}};
  for (int i = 0; i < 3; i++)
    if (k[0][i] != k[1][i]) return k[0][i] < k[1][i] ? -1 : 1;
  return 0;
}

/*
 * A stream's front half issues all its waits for the peers' "ready" before
 * its copies.  Where a peer posted the first sides of this launch's
 * messages in several launches of its own (a receive, then a send, each
 * alone), the "ready" of its later launch comes only once its earlier one
 * completed, which needs this rank's copy: waiting for both before copying
 * would hang (NCCL and MPI complete such a pattern).  So the messages this
 * rank moves go in steps, one per launch of the peer's process in their
 * order (wait, copy, "done"), counted per stream and process (launches are
 * numbered per process, whichever communicator or rank posted them): step
 * k holds each process's k-th launch.  Nothing waits longer than before: a
 * step's copies need the earlier steps' copies and its own waits only.  A
 * peer that posted all of them in one group (the usual case) gives one
 * step, found without sorting (plans of one peer usually come together).
 * order has room for n pointers: the sort needs no memory of its own, so
 * no launch goes without its steps (all in step 0, a launch could hang
 * against such a peer, and behind a gated wait of its own).
 */
static void assign_steps(plan_t* plans, plan_t** order, int n) {
  int several = 0;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    p->step = 0;
    if (!moved_here(p)) continue;
    for (int j = i - 1; j >= 0 && !several; j--) { /* the last one before of the same stream and process */
      const plan_t* q = &plans[j];
      if (!moved_here(q) || q->op->stream != p->op->stream || q->peer_proc != p->peer_proc) continue;
      several = q->peer_launch != p->peer_launch;
      break;
    }
  }
  if (!several) return;
  int m = 0;
  for (int i = 0; i < n; i++)
    if (moved_here(&plans[i])) order[m++] = &plans[i];
  qsort(order, (size_t)m, sizeof(*order), step_order);
  for (int i = 1; i < m; i++) {
    const plan_t *prev = order[i - 1], *p = order[i];
    if (p->op->stream == prev->op->stream && p->peer_proc == prev->peer_proc)
      order[i]->step = prev->step + (p->peer_launch != prev->peer_launch);
  }
}

/* Steps of stream s's front half (assign_steps); none where this rank moves
 * nothing on s, whose "ready" writes then stay in the batch that the back
 * half's waits join: one stream item less for a rank that only signals
 * (the one whose copies a delegate moves). */
static int front_steps(const plan_t* plans, int n, cudaStream_t s) {
  int steps = 0;
  for (int i = 0; i < n; i++)
    if (moved_here(&plans[i]) && plans[i].op->stream == s && plans[i].step >= steps) steps = plans[i].step + 1;
  return steps;
}

/* Whether p is one of the messages this rank moves on stream s in step
 * step (of chain chain, where chain >= 0: issue_chains). */
static int in_step(const plan_t* p, cudaStream_t s, int step, int chain) {
  return moved_here(p) && p->op->stream == s && p->step == step && (chain < 0 || p->chain == chain);
}

/*
 * The steps (assign_steps) of the messages this rank moves on stream s,
 * issued on stream on with batch b (on on): per step the waits for the
 * peers' "ready", the copies and the "done" writes, which share a batch
 * with the next step's waits.  chain >= 0: only that chain's messages
 * (issue_chains).
 */
static ncclResult_t issue_steps(plan_t* plans, int n, cudaStream_t s, cudaStream_t on, mpn_memops_t* b, int chain) {
  ncclResult_t first = ncclSuccess;
  for (int step = 0, steps = front_steps(plans, n, s); step < steps; step++) {
    for (int i = 0; i < n; i++) { /* waits for ready */
      plan_t* p = &plans[i];
      if (!in_step(p, s, step, chain)) continue;
      if (p->ev) { /* the writes still in b (the previous step's "done") go first */
        mpn_keep(&first, mpn_memops_flush(b));
        ncclResult_t waited = mpn_cuda_result(NULL, cudaStreamWaitEvent(on, p->ev, 0), "cudaStreamWaitEvent");
        mpn_keep(&first, waited);
        mpn_event_put(p->ev_dev, p->ev);
        p->ev = NULL;
        if (waited != ncclSuccess) mpn_keep(&first, plan_flag(b, p, 0, 1)); /* the flag, then */
      } else {
        mpn_keep(&first, plan_flag(b, p, 0, 1));
      }
    }
    mpn_keep(&first, mpn_memops_flush(b));
    ncclResult_t copied = issue_copies(plans, n, s, on, 0, step, chain);
    if (copied != ncclSuccess) copies_lost(plans, n, s, step, chain, copied);
    mpn_keep(&first, copied);
    for (int i = 0; i < n; i++) { /* done writes (and events), in the batch of the next step's waits */
      plan_t* p = &plans[i];
      if (!in_step(p, s, step, chain)) continue;
      if (p->local) publish_done(p, on);
      mpn_keep(&first, plan_flag(b, p, 1, 0));
    }
  }
  return first;
}

/*
 * Steps wait for every process's k-th launch together, which can hang
 * where the launches of several processes depend on one another through
 * this rank: if process B's first launch waits, through B's earlier
 * stream work, for A's second launch, whose "ready" needs this rank's copy
 * for A's first, the step that waits for A's first and B's first never
 * ends (NCCL completes such a chain; test_p2p chain_three).  No order on
 * one stream suits every pattern, so where the messages this rank moves
 * on s come from several processes and some process posted them in
 * several launches, each process's steps go on a stream of their own: the
 * caller's stream for the first, lanes of the communicator (lanes.h) for
 * the others, forked once the stream's first writes are issued and joined
 * before what follows.  More processes than streams share lanes in turn.
 * Not while capturing (the steps stay on the one stream there).  A front
 * of one step from several processes can hang the same way (docs/P2P.md,
 * known problem 8 (c)); chaining those too cost a 4 MiB all-to-all of 4
 * ranks without MPS ten times its time, and halo3d under MPS its flag
 * kernel, so they are not chained.
 */
static int chained(const plan_t* plans, int n, cudaStream_t s) {
  const plan_t* one = NULL;
  int several = 0;
  for (int i = 0; i < n; i++) {
    const plan_t* p = &plans[i];
    if (!moved_here(p) || p->op->stream != s) continue;
    if (p->graph) return 0;
    if (one == NULL) one = p;
    several |= p->peer_proc != one->peer_proc;
  }
  return several && front_steps(plans, n, s) > 1;
}

static ncclResult_t issue_chains(plan_t* plans, int n, cudaStream_t s, mpn_memops_t* b) {
  ncclResult_t first = mpn_memops_flush(b); /* the ready writes and eager sends before any chain */
  int procs = 0;                            /* the chain of each process: its number among them, in turn */
  const plan_t* lead = NULL;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!moved_here(p) || p->op->stream != s) continue;
    if (lead == NULL) lead = p;
    p->chain = -1;
    for (int j = 0; j < i && p->chain < 0; j++)
      if (moved_here(&plans[j]) && plans[j].op->stream == s && plans[j].peer_proc == p->peer_proc)
        p->chain = plans[j].chain;
    if (p->chain < 0) p->chain = procs++ % (MPN_LANES + 1);
  }
  struct ncclComm* comm = lead->op->comm;
  mpn_fork_t fork;
  mpn_fork_init(&fork, s, comm->cuda_dev, mpn_p2p_lanes(comm));
  int chains = procs < MPN_LANES + 1 ? procs : MPN_LANES + 1;
  cudaStream_t on = s;
  ncclResult_t forked = mpn_fork_next(&fork, &on);   /* chain 0, on s; makes the lanes */
  if (forked != ncclSuccess || fork.lanes == NULL) { /* no lanes: the steps of all on s, as unforked */
    mpn_keep(&first, forked);
    mpn_keep(&first, issue_steps(plans, n, s, s, b, -1));
    return first;
  }
  for (int c = 0; c < chains; c++) {
    if (c > 0) {
      forked = mpn_fork_next(&fork, &on);
      mpn_keep(&first, forked);
      if (forked != ncclSuccess) on = s; /* in turn on s, then */
    }
    mpn_memops_t chain;
    mpn_memops_init(&chain, b->drv, on);
    mpn_keep(&first, issue_steps(plans, n, s, on, &chain, c));
    mpn_keep(&first, mpn_memops_flush(&chain));
  }
  mpn_keep(&first, mpn_fork_join(&fork));
  return first;
}

/*
 * Issuing goes on past a failure: the first error is kept (mpn_keep) and
 * returned, but every posted plan still gets its flag writes and waits, so
 * that no peer waits for a flag this rank never writes (only copies are
 * lost).
 *
 * First half of the plans that use stream s: a staged buffer (memory pool,
 * or in the peer's way: p2p/side.h) goes to its stage; one batch with the
 * "ready" writes (first side), those that
 * must wait for their slot's previous message of another stream last,
 * behind that wait (gated); the eager sends' copies
 * into the inboxes and their "done" writes, which wait for nothing of this
 * launch and so come before any wait for a peer (a peer's later "ready" may
 * depend on them); then per step (assign_steps) the waits for the peers' "ready"
 * (second side), the copies and the "done" writes, which share a batch
 * with the next step's waits; the last step's batch is left open with
 * keep_open for the back half's waits (b: an empty batch on s).  Within a
 * batch the operations run in order.
 */
static ncclResult_t issue_front(plan_t* plans, int n, cudaStream_t s, mpn_memops_t* b, int keep_open) {
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    /* (a receive buffer too: a message that moves nothing, refused by the
     * peer, gives it back as it was from the stage, not the stage's last data) */
    if (!p->stage || !p->posted || p->op->stream != s) continue;
    ncclResult_t staged = mpn_cuda_result(
        NULL, cudaMemcpyAsync(mpn_stage_ptr(p->stage), p->op->buf, p->op->bytes, cudaMemcpyDeviceToDevice, s),
        p->op->kind == MPN_OP_SEND ? "copying a send buffer to its stage" : "copying a receive buffer to its stage");
    if (staged != ncclSuccess) mpn_plan_report_copy_lost(p, staged); /* its "ready" still comes */
    mpn_keep(&first, staged);
  }
  for (int pass = 0; pass < 2; pass++) { /* the ungated "ready" writes, then the gates and the gated ones */
    for (int i = 0; pass == 1 && i < n; i++) {
      plan_t* p = &plans[i];
      if (p->posted && p->op->stream == s && plan_gated(p))
        mpn_keep(&first, mpn_memops_add(b, mpn_pair_flag(p->pair, p->seq - MPN_PAIR_SLOTS, 0, 1),
                                        p->seq - MPN_PAIR_SLOTS, MPN_MEMOP_WAIT_GEQ));
    }
    for (int i = 0; i < n; i++) {
      plan_t* p = &plans[i];
      if (p->posted && p->op->stream == s && p->role == MPN_POST_FIRST && !p->eager && plan_gated(p) == pass)
        mpn_keep(&first, plan_flag(b, p, 0, 0));
    }
  }
  int eager = 0;
  for (int i = 0; i < n; i++) eager |= eager_on(&plans[i], s, MPN_OP_SEND);
  if (eager) { /* eager sends wait for nothing (a captured one for its last replay's copy out): before any wait
                  for a peer */
    for (int i = 0; i < n; i++)
      if (eager_on(&plans[i], s, MPN_OP_SEND) && plans[i].eager == MPN_EAGER_GRAPH)
        mpn_keep(&first, mpn_memops_add(b, plan_graph_full(&plans[i]), MPN_PAIR_GRAPH_FREE, MPN_MEMOP_WAIT_NOR));
    mpn_keep(&first, mpn_memops_flush(b));
    ncclResult_t copied = issue_copies(plans, n, s, s, 1, 0, -1);
    mpn_keep(&first, copied);
    for (int i = 0; i < n; i++) {
      plan_t* p = &plans[i];
      if (!eager_on(p, s, MPN_OP_SEND)) continue;
      if (copied != ncclSuccess) eager_send_lost(p, b);
      mpn_keep(&first, plan_flag(b, p, 1, 0));
    }
  }
  if (chained(plans, n, s))
    mpn_keep(&first, issue_chains(plans, n, s, b));
  else
    mpn_keep(&first, issue_steps(plans, n, s, s, b, -1));
  mpn_plan_imports_used(plans, n, s); /* after the last step's copies */
  if (!keep_open) mpn_keep(&first, mpn_memops_flush(b));
  return first;
}

/* Eager receives on stream s: copies out of the inbox, whose kernel then
 * writes the words that free their slots.  A batch of stream memory
 * operations writes those of receives that copy nothing, and of all of
 * them if a kernel launch failed (the data is lost, the slots are not). */
static ncclResult_t issue_eager_out(plan_t* plans, int n, cudaStream_t s, mpn_memops_t* b) {
  ncclResult_t first = ncclSuccess, launched = ncclSuccess;
  mpn_copies_t copies;
  mpn_copies_init(&copies, s);
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    mpn_copy_t c;
    if (!eager_on(p, s, MPN_OP_RECV) || !plan_eager_copy(p, &c)) continue;
    if (p->eager == MPN_EAGER_GRAPH) { /* its flag goes back to 0 below */
      mpn_keep(&launched, mpn_copies_add_kernel(&copies, &c));
      continue;
    }
    mpn_copy_then_t then = {(unsigned long long*)(uintptr_t)mpn_eager_freed(p->pair, p->eager, p->eager_n),
                            p->eager_n + 1,
                            (unsigned int*)(uintptr_t)mpn_eager_arrivals(p->pair, p->eager, p->eager_n)};
    mpn_keep(&launched, mpn_copies_add_then(&copies, &c, &then));
  }
  mpn_keep(&launched, mpn_copies_flush(&copies));
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (eager_on(p, s, MPN_OP_RECV) && p->eager == MPN_EAGER_GRAPH)
      mpn_keep(&first, mpn_memops_add(b, plan_graph_full(p), 0, MPN_MEMOP_WRITE));
    else if (eager_on(p, s, MPN_OP_RECV) && (launched != ncclSuccess || p->eager_bytes == 0)) /* (eager_copy's) */
      mpn_keep(&first, mpn_memops_add(b, mpn_eager_freed(p->pair, p->eager, p->eager_n), p->eager_n + 1,
                                      MPN_MEMOP_WRITE));
  }
  mpn_keep(&first, launched);
  mpn_keep(&first, mpn_memops_flush(b));
  return first;
}

/* Second half: the waits for "done" (first side; added to b, which may
 * still hold the front's last batch), then a memory-pool receive buffer's
 * data comes out of its stage. */
static ncclResult_t issue_back(plan_t* plans, int n, cudaStream_t s, mpn_memops_t* b) {
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (eager_on(p, s, MPN_OP_RECV)) /* (a graph slot's inbox is freed after the copy out: issue_eager_out) */
      mpn_keep(&first, p->eager == MPN_EAGER_GRAPH ? mpn_memops_add(b, plan_graph_full(p), 1, MPN_MEMOP_WAIT_GEQ)
                                                   : plan_flag(b, p, 1, 1));
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_FIRST || p->eager) continue;
    int dev = -1;
    if (p->local) mpn_keep(&first, mpn_memops_flush(b)); /* the batch's writes go out before a host wait */
    cudaEvent_t done = p->local ? await_done(p, &dev) : NULL;
    ncclResult_t waited = done ? mpn_cuda_result(NULL, cudaStreamWaitEvent(s, done, 0), "cudaStreamWaitEvent")
                               : ncclInvalidUsage;
    if (done) mpn_event_put(dev, done);
    if (waited != ncclSuccess) mpn_keep(&first, plan_flag(b, p, 1, 1)); /* the flag, then */
  }
  mpn_keep(&first, mpn_memops_flush(b));
  mpn_keep(&first, issue_eager_out(plans, n, s, b));
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->stage || !p->posted || p->op->stream != s) continue;
    if (p->op->kind == MPN_OP_RECV)
      mpn_keep(&first, mpn_cuda_result(NULL, cudaMemcpyAsync(p->op->buf, mpn_stage_ptr(p->stage), p->op->bytes,
                                               cudaMemcpyDeviceToDevice, s),
                               "copying a stage to its receive buffer"));
    mpn_stage_put(p->stage, s, p->graph ? MPN_STAGE_PINNED : MPN_STAGE_STREAM);
    p->stage = NULL;
  }
  return first;
}

/* Whether a single stream's kernel ends the launch's work on it: no peer in
 * this process (the stream may wait for its "done" event after the kernel)
 * and none over UCX (the lanes are joined after it). */
static int kernel_ends_launch(const plan_t* plans, int n) {
  for (int i = 0; i < n; i++) {
    const mpn_op_t* op = plans[i].op;
    int t = op->comm->transport[op->peer];
    if (t == MPN_TRANSPORT_LOCAL || t == MPN_TRANSPORT_UCX) return 0;
  }
  return 1;
}
/* Whether every plan of the launch uses one stream (*out). */
static int single_stream(const plan_t* plans, int n, cudaStream_t* out) {
  for (int i = 1; i < n; i++)
    if (plans[i].op->stream != plans[0].op->stream) return 0;
  *out = n ? plans[0].op->stream : NULL;
  return n > 0;
}

ncclResult_t mpn_p2p_issue(const mpn_driver_t* drv, plan_t* plans, plan_t** scratch, int n, int* current) {
  ncclResult_t first = ncclSuccess;
  cudaStream_t only = NULL;
  assign_steps(plans, scratch, n);
  int one = single_stream(plans, n, &only);
  mpn_memops_t open; /* a launch of one stream: the front's last batch, still open for the back's waits */
  if (one) {
    mpn_memops_init(&open, drv, only);
    int issued = 0;
    if (mpn_p2p_sync_fits(plans, n, only, 0, 1, 1, 0)) { /* one stream item for the whole launch */
      mpn_cuda_switch_device(current, plans[0].op->comm->cuda_dev);
      ncclResult_t res = mpn_p2p_sync_issue(drv, plans, n, only, 0, 1, 1, kernel_ends_launch(plans, n), &issued);
      if (issued) return res;
    }
  }
  for (int half = 0; half < 2; half++)
    for (int i = 0; i < n; i++) {
      int seen = 0;
      for (int j = 0; j < i && !seen; j++) seen = plans[j].op->stream == plans[i].op->stream;
      if (seen) continue;
      mpn_cuda_switch_device(current, plans[i].op->comm->cuda_dev); /* a stream's work is issued on its device */
      cudaStream_t s = plans[i].op->stream;
      /* One stream's half takes the blocks its copies call for, as a whole
       * launch does (a kernel of one block is still launched early). */
      int issued = 0, grid = one;
      if (mpn_p2p_sync_fits(plans, n, s, half, half, grid, 1)) {
        if (half == 1 && one) mpn_keep(&first, mpn_memops_flush(&open)); /* the front's batch goes first */
        mpn_keep(&first, mpn_p2p_sync_issue(drv, plans, n, s, half, half, grid, 0, &issued));
      }
      if (issued) continue;
      /* With one stream the front's "done" batch takes the back's waits as
       * well: one stream item less, which on a time-sliced GPU every
       * process pays in turn. */
      if (!one) mpn_memops_init(&open, drv, s);
      mpn_keep(&first, half == 0 ? issue_front(plans, n, s, &open, one) : issue_back(plans, n, s, &open));
    }
  return first;
}
