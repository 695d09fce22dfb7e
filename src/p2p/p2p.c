/*
 * p2p.c - send/receive scheduling for peers reachable through shared memory
 * (self, same process, CUDA IPC on the same host).
 *
 * Every message meets its match in a pair slot (pair.h).  The side that
 * arrives second moves the data; the first only writes "ready" and waits for
 * "done".  issue.c turns a launch into stream work in two halves: every
 * stream's "ready" handshake, copies and "done" writes, then every stream's
 * waits for "done"; waits depend only on other ranks' earlier steps, so any
 * pattern of sends and receives inside one group completes.  Of two
 * processes that time-slice a GPU (no MPS) the lower rank waits briefly to
 * arrive second, so that it moves both directions and the other process
 * needs no engine at all (sliced.c); with several such processes in a
 * launch, messages go through the receivers' inboxes instead (eager.h),
 * the host waiting, bounded, for a slot the GPU has not freed yet
 * (slot_wait).  Between processes on different GPUs each side moves its
 * own large sends (push.h).  Messages enqueued while their stream is
 * captured in a CUDA graph use slots of their own whose flags go back to
 * 0, so that every replay repeats the same handshake.
 */
#include "p2p/p2p.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/drain.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/device.h"
#include "cuda/driver.h"
#include "cuda/event.h"
#include "p2p/eager.h"
#include "p2p/gap.h"
#include "p2p/order.h"
#include "p2p/pair.h"
#include "p2p/plan.h"
#include "p2p/push.h"
#include "p2p/report.h"
#include "p2p/side.h"
#include "p2p/sliced.h"
#include "p2p/stage.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/staged.h"
#endif

typedef struct {
  mpn_pair_t *send, *recv; /* me -> peer, peer -> me */
  uint64_t send_seq, recv_seq;             /* messages not captured */
  uint64_t graph_send_seq, graph_recv_seq; /* messages captured in graphs */
  /* Per side (MPN_SIDE_SEND, MPN_SIDE_RECV): */
  uint64_t eager_count[2][2]; /* and ring: messages that took the pair's inbox rings (eager.h: small, big) */
  uint64_t launch[2];         /* the launch that posted last */
  uint64_t eager_base[2][2];  /* and ring: the eager count when that launch began */
  int slot_timed_out[2];      /* a host wait for a slot ran out; none until a slot is free at once */
  uint64_t errors_seen[2];
  mpn_slot_streams_t streams[2]; /* the stream each slot last served (order.h) */
} peer_state_t;

struct mpn_p2p {
  peer_state_t* peers; /* nranks, filled on first use */
  /* How messages went (logged at destroy, NCCL_DEBUG=INFO, subsystem P2P). */
  uint64_t posted, moved, delegate_timeouts;
  uint64_t eager[3];  /* messages through the inbox's small and big rings and the graph slots' inbox, by kind - 1
                         (eager.h; mpn_p2p_stats) */
  uint64_t no_slot;   /* messages whose first side found its ring's slot still in use */
  uint64_t slot_waits;    /* time-sliced GPU: posts that waited on the host for a slot and got it */
  uint64_t slot_timeouts; /* ... and that waited in vain */
  uint64_t pushed;        /* sends posted after the peer's receive, so this rank moved them (push.h) */
  uint64_t push_timeouts; /* ... and those whose wait for it ran out */
  mpn_gap_t gap;          /* GPU work between launches with one process of a time-sliced GPU */
  mpn_lanes_t lanes;      /* streams for large copies to other GPUs beside one another (issue.c) */
};

mpn_lanes_t* mpn_p2p_lanes(struct ncclComm* comm) { return &comm->p2p->lanes; }

/* Numbers the launches of the process, so a pair can tell which of its
 * eager messages the current launch posted (slot_wait), and a second side
 * in which of this process's launches each first side came (mpn_side_t.launch,
 * the steps of issue.c). */
static uint64_t launches;


/* Per-peer state, made on first use.  The watchdog thread reads these
 * pointers concurrently, so each is published with a release store. */
static ncclResult_t peer_state(struct ncclComm* comm, int peer, peer_state_t** out) {
  if (comm->p2p == NULL) {
    struct mpn_p2p* p2p = calloc(1, sizeof(*p2p));
    if (p2p == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
    __atomic_store_n(&comm->p2p, p2p, __ATOMIC_RELEASE);
  }
  if (comm->p2p->peers == NULL) {
    peer_state_t* peers = calloc((size_t)comm->nranks, sizeof(*peers));
    if (peers == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
    __atomic_store_n(&comm->p2p->peers, peers, __ATOMIC_RELEASE);
  }
  peer_state_t* ps = &comm->p2p->peers[peer];
  mpn_pair_t* pair;
  if (ps->send == NULL) {
    MPN_CHECK(mpn_pair_map(comm->bootstrap->key, comm->rank, peer, &comm->abort_flag, &pair));
    __atomic_store_n(&ps->send, pair, __ATOMIC_RELEASE);
  }
  if (ps->recv == NULL) {
    MPN_CHECK(mpn_pair_map(comm->bootstrap->key, peer, comm->rank, &comm->abort_flag, &pair));
    __atomic_store_n(&ps->recv, pair, __ATOMIC_RELEASE);
  }
  *out = ps;
  return ncclSuccess;
}

ncclResult_t mpn_p2p_pairs(struct ncclComm* comm, int peer, mpn_pair_t** send, mpn_pair_t** recv) {
  peer_state_t* ps;
  MPN_CHECK(peer_state(comm, peer, &ps));
  *send = ps->send;
  *recv = ps->recv;
  return ncclSuccess;
}

ncclResult_t mpn_p2p_connect_local(struct ncclComm* comm) {
  if (comm->cuda_dev < 0) return ncclSuccess;
  int saved = mpn_cuda_device_enter(comm->cuda_dev);
  ncclResult_t res = ncclSuccess;
  for (int peer = 0; peer < comm->nranks && res == ncclSuccess; peer++) {
    mpn_transport_kind_t t = comm->transport[peer];
    peer_state_t* ps;
    if (t == MPN_TRANSPORT_SELF || t == MPN_TRANSPORT_LOCAL) res = peer_state(comm, peer, &ps);
  }
  mpn_cuda_device_leave(saved);
  return res;
}

/* Finds the message's pair and number (prev: the launch's message before,
 * whose stream's id holds for the same stream). */
static ncclResult_t plan_prepare(plan_t* p, const plan_t* prev) {
  mpn_op_t* op = p->op;
  peer_state_t* ps = NULL;
  MPN_CHECK(peer_state(op->comm, op->peer, &ps));
  int send = op->kind == MPN_OP_SEND;
  p->pair = send ? ps->send : ps->recv;
  p->graph = op->capturing; /* (ncclGroupEnd's capture_check asked) */
  if (p->graph)
    p->stream_id = 0; /* (graph messages have slots of their own) */
  else if (!op->stream_id && prev && prev->prepared && prev->op->stream == op->stream &&
           prev->op->comm->cuda_dev == op->comm->cuda_dev)
    p->stream_id = prev->stream_id; /* (not asked by the checks; a per-thread handle names one stream per device) */
  else
    p->stream_id = mpn_op_stream_id(op);
  uint64_t* counter = p->graph ? (send ? &ps->graph_send_seq : &ps->graph_recv_seq)
                               : (send ? &ps->send_seq : &ps->recv_seq);
  p->seq = ++*counter;
  /* Messages seq and seq + MPN_PAIR_SLOTS share a slot and its flag words,
   * whose waits are "at least": no flag of the later may be written before
   * the earlier one's (a wait for the later would then see the earlier
   * value last and hang, or one for the earlier pass before its data
   * moved).  Launches of one stream keep that order; a message from another
   * stream than its slot's previous one may have to wait for that one's
   * "done" (plan.h, plan_gated), and the peer does the same on its side. */
  p->after_prev = !p->graph && mpn_slot_streams_note(&ps->streams[plan_side(p)], p->seq, p->stream_id);
  const mpn_topo_t* t = &op->comm->topo;
  mpn_transport_kind_t kind = op->comm->transport[op->peer];
  p->local = !p->graph && mpn_transport_by_events(op->comm, op->peer);
  p->spin = !p->local && kind == MPN_TRANSPORT_IPC && mpn_param_int(MPN_PARAM_KERNEL_SYNC) > 0 &&
            mpn_topo_kernels_concurrent(t, op->comm->rank, op->peer);
  mpn_eager_choose(p);
  p->prepared = 1;
  return ncclSuccess;
}

/* A message of a rank to itself whose two sides are both in this launch,
 * on one stream (each side's self_other names the other): that stream
 * writes its flags before it waits for them, so under MPS it needs no
 * events (issue.c's ranks of one process), and it may go in the flag
 * kernel with the stream's other messages (issue.c, self_in_kernel).  Both
 * sides or neither, before either describes itself. */
static void self_same_stream(plan_t* plans, int n) {
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->prepared || p->self_other || p->op->comm->transport[p->op->peer] != MPN_TRANSPORT_SELF) continue;
    for (int j = i + 1; j < n; j++) {
      plan_t* q = &plans[j];
      if (q->prepared && q->op->comm == p->op->comm && q->op->peer == p->op->peer && q->op->kind != p->op->kind &&
          q->graph == p->graph && q->seq == p->seq && q->op->stream == p->op->stream) {
        p->self_other = q;
        q->self_other = p;
        p->local = q->local = 0;
        break;
      }
    }
  }
}

/* The gap before (end 0) or after (end 1) this launch on the timed plan's stream (gap.h). */
static int gap_time(const plan_t* timed, int end, int* current) {
  struct ncclComm* comm = timed->op->comm;
  mpn_cuda_switch_device(current, comm->cuda_dev);
  if (!end) return mpn_gap_launch_begin(&comm->p2p->gap, comm->cuda_dev, timed->op->stream);
  mpn_gap_launch_end(&comm->p2p->gap, comm->cuda_dev, timed->op->stream);
  return 0;
}

/*
 * On a time-sliced GPU each iteration of an application pays context
 * switches, so its host runs ahead of the GPU and the slot of its next
 * message is rarely free yet.  Waiting on the host for the GPU to free it
 * costs no GPU time (the GPU still has the other slots' messages queued)
 * and keeps the one-hop path.  Bounded (MPINCCL_SLICED_INBOX_WAIT_US), so a
 * receiver that cannot progress before this host posts more only delays;
 * after one such timeout the pair's side waits no more until a slot is
 * free at once again (the peer caught up).  Never for a slot whose previous
 * message this launch posted (its copy out comes after this launch's own
 * flags), nor once the peer has posted this message (it chose the path
 * already).  Returns whether the slot is free.
 */
static int slot_wait(plan_t* p, peer_state_t* ps, int side /* MPN_SIDE_* */) {
  struct ncclComm* comm = p->op->comm;
  uint64_t slots = mpn_eager_slots(p->eager_ok);
  int64_t budget_us = mpn_param_int(MPN_PARAM_SLICED_INBOX_WAIT);
  if (!mpn_sliced_peer(p->op) || budget_us <= 0 || ps->slot_timed_out[side] || p->pair->dflags == 0 ||
      p->eager_n < slots || p->eager_n - slots >= ps->eager_base[side][p->eager_ok - 1])
    return 0;
  uint64_t deadline = mpn_clock_now_ns() + (uint64_t)budget_us * 1000;
  while (!mpn_eager_free(p->pair, p->eager_ok, p->eager_n)) {
    if (mpn_comm_peer_failure(comm) != ncclSuccess || comm->abort_flag ||
        mpn_pair_peer_posted(p->pair, p->seq, 0, side))
      return 0;
    if (mpn_clock_now_ns() > deadline) {
      ps->slot_timed_out[side] = 1;
      comm->p2p->slot_timeouts++;
      MPN_INFO(MPN_SUBSYS_P2P, "rank %d: no inbox slot freed by rank %d within MPINCCL_SLICED_INBOX_WAIT_US=%lld; "
               "its %s take the two-hop path when no slot is free, until one is free at once again",
               comm->rank, p->op->peer, (long long)budget_us, side == MPN_SIDE_SEND ? "sends" : "receives");
      return 0;
    }
    usleep(5);
  }
  comm->p2p->slot_waits++;
  return 1;
}

/* Whether the message keeps the inbox it chose (mpn_eager_choose): its slot
 * must be free, now or after a bounded wait (slot_wait). */
static void plan_slot(plan_t* p, peer_state_t* ps, int side) {
  uint64_t* eager_counts = ps->eager_count[side]; /* per ring */
  if (ps->launch[side] != p->launch) {            /* this launch's first message of the pair and side */
    ps->launch[side] = p->launch;
    memcpy(ps->eager_base[side], eager_counts, sizeof(ps->eager_base[side]));
  }
  if (p->eager_ok == MPN_EAGER_GRAPH) { /* the graph slot's own inbox slot: free while the message holds it */
    p->eager_n = mpn_pair_graph_index(p->seq);
    if (!mpn_eager_graph_ok(p->pair)) p->eager_ok = MPN_EAGER_NONE;
    return;
  }
  /* Every earlier message of the pair is posted: its path is known. */
  p->eager_n = p->eager_ok ? eager_counts[p->eager_ok - 1] : 0;
  int free_now = p->eager_ok && mpn_eager_free(p->pair, p->eager_ok, p->eager_n);
  if (free_now) ps->slot_timed_out[side] = 0; /* the peer keeps up again */
  if (p->eager_ok && !free_now && !slot_wait(p, ps, side)) {
    p->eager_ok = MPN_EAGER_NONE;
    p->op->comm->p2p->no_slot++;
  }
}

/* The second side of a message whose first side chose an inbox follows it. */
static ncclResult_t follow_inbox(plan_t* p, const mpn_side_t* mine, mpn_side_t* other, ncclResult_t bad,
                                 uint64_t* eager_counts) {
  struct ncclComm* comm = p->op->comm;
  ncclResult_t res = ncclSuccess;
  uint64_t expected = other->eager == MPN_EAGER_GRAPH ? mpn_pair_graph_index(p->seq) : eager_counts[other->eager - 1];
  if (other->eager_n != expected) { /* cannot happen; the peer's number keeps both going */
    res = mpn_error_set(NULL, ncclInternalError, "message %llu with rank %d: eager number %llu here, %llu at the peer",
                        (unsigned long long)p->seq, p->op->peer, (unsigned long long)expected,
                        (unsigned long long)other->eager_n);
    mpn_comm_fail_async(comm, res, "%s", mpn_error_last(NULL));
  }
  p->eager_n = other->eager_n;
  int same = res == ncclSuccess && !mpn_plan_buffer_refused(p, bad, other);
  if (same && mpn_plan_sides_differ(mine, other)) {
    mpn_plan_report_mismatch(p, mine, other); /* and nothing moves */
    same = 0;
  }
  mpn_eager_plan(p, other->eager, same ? p->op->bytes : 0);
  if (other->eager != MPN_EAGER_GRAPH) eager_counts[other->eager - 1] = p->eager_n + 1;
  comm->p2p->eager[other->eager - 1]++;
  return res != ncclSuccess ? res : bad;
}

/* The side posted second: it moves the data (or follows the first side's
 * inbox), so it learns the first side's buffer, event and choices. */
static ncclResult_t plan_second(plan_t* p, mpn_side_t* mine, ncclResult_t bad, uint64_t* eager_counts) {
  mpn_op_t* op = p->op;
  int side = plan_side(p);
  if (p->stage) { /* this side copies from or to its own buffer directly */
    mpn_stage_put(p->stage, NULL, MPN_STAGE_UNUSED);
    p->stage = NULL;
  }
  mpn_side_t other = mpn_pair_slot(p->pair, p->seq, p->graph)->side[side ^ 1];
  mpn_pair_consume(p->pair, p->seq, p->graph);
  p->peer_proc = other.proc;
  mpn_side_heed(&other);
  p->peer_launch = other.launch;
  if (other.eager == MPN_EAGER_SMALL || other.eager == MPN_EAGER_BIG || other.eager == MPN_EAGER_GRAPH)
    return follow_inbox(p, mine, &other, bad, eager_counts);
  if (p->local) { /* own event unused; the first side's is waited for, then given back */
    mpn_event_put(mine->event_dev, (cudaEvent_t)(uintptr_t)mine->event);
    p->ev = (cudaEvent_t)(uintptr_t)other.event;
    p->ev_dev = other.event_dev;
  }
  if (mpn_plan_buffer_refused(p, bad, &other)) return bad;
  if (mpn_plan_sides_differ(mine, &other)) {
    mpn_plan_report_mismatch(p, mine, &other);
    return ncclSuccess;
  }
  if (mine->bytes == 0) return ncclSuccess; /* a message of no bytes: its flags alone, no import */
  void* far;
  ncclResult_t res = mpn_side_resolve(p, &other, &far);
  if (res != ncclSuccess) {
    mpn_plan_report_failed_move(p, res);
    return res;
  }
  int send = op->kind == MPN_OP_SEND;
  p->src = send ? op->buf : far;
  p->dst = send ? far : op->buf;
  p->move = mine->bytes > 0;
  return ncclSuccess;
}

/* Posts one message.  A failure after the slot is taken still leaves it
 * posted, so nobody hangs; a refused slot (mpn_pair_post) fails both
 * communicators instead. */
static ncclResult_t plan_post(plan_t* p) {
  mpn_op_t* op = p->op;
  struct ncclComm* comm = op->comm;
  int side = plan_side(p);
  peer_state_t* ps = &comm->p2p->peers[op->peer];
  uint64_t* eager_counts = ps->eager_count[side]; /* per ring */
  plan_slot(p, ps, side);
  mpn_side_t mine;
  ncclResult_t bad = mpn_side_describe(p, &mine);
  ncclResult_t refused = mpn_pair_post(p->pair, p->seq, p->graph, op->capture_id, side, &mine, &p->role);
  if (refused != ncclSuccess) {
    mpn_plan_report_refused_post(p, &mine, refused);
    return refused;
  }
  p->posted = 1;
  if (p->role == MPN_POST_SECOND) return plan_second(p, &mine, bad, eager_counts);
  if (mine.eager) { /* a refused buffer moves nothing; the send's size word 0 keeps the receiver from copying */
    mpn_eager_plan(p, mine.eager, bad == ncclSuccess ? op->bytes : 0);
    if (mine.eager != MPN_EAGER_GRAPH) eager_counts[mine.eager - 1]++; /* (a ring's numbering) */
    comm->p2p->eager[mine.eager - 1]++;
  }
  return bad;
}

/* Messages with peers over UCX go through host staging (ucx/staged.c) on
 * lanes of their own: forked from the streams before anything else of the
 * group is enqueued, so that they wait for none of it, and issued after. */
static int ucx_ops(mpn_op_t* ops, mpn_op_t*** out) {
  int n = 0;
  for (mpn_op_t* op = ops; op; op = op->next) n += op->comm->transport[op->peer] == MPN_TRANSPORT_UCX;
  *out = NULL;
  if (n == 0 || (*out = calloc((size_t)n, sizeof(**out))) == NULL) return n ? -1 : 0;
  int k = 0;
  for (mpn_op_t* op = ops; op; op = op->next)
    if (op->comm->transport[op->peer] == MPN_TRANSPORT_UCX) (*out)[k++] = op;
  return n;
}

/* A pair and the side of it this process posts (a send to itself, or two
 * ranks of this process, post both sides of one pair). */
typedef struct {
  const mpn_pair_t* pair;
  int side;
} pair_side_t;

/* Whether p's pair and side are among those held back in this sweep. */
static int pair_held(const pair_side_t* held, int nheld, const plan_t* p) {
  for (int k = 0; k < nheld; k++)
    if (held[k].pair == p->pair && held[k].side == plan_side(p)) return 1;
  return 0;
}

/* Waiting for peers to catch up: whether to go on (0: give up, *why set). */
static int behind_wait(plan_t* plans, const char* done, int n, uint64_t deadline, ncclResult_t* why) {
  for (int i = 0; i < n; i++) {
    struct ncclComm* comm = plans[i].op->comm;
    ncclResult_t failed = plans[i].prepared && !done[i] ? mpn_comm_peer_failure(comm) : ncclSuccess;
    if (failed != ncclSuccess || comm->abort_flag) {
      *why = comm->abort_flag ? ncclInvalidUsage : failed;
      return 0;
    }
  }
  if (mpn_clock_now_ns() > deadline) {
    *why = ncclInvalidUsage;
    return 0;
  }
  usleep(20);
  return 1;
}

/* A wait for peers' receives ran out: the sends still waiting post as they
 * are, and the peer moves them when it posts. */
static void push_give_up(plan_t* plans, const char* done, int n) {
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (done[i] || !mpn_push_pending(p)) continue;
    p->push = 0;
    p->op->comm->p2p->push_timeouts++;
  }
}

/*
 * Posts the prepared plans, in program order within each pair.  A plan
 * whose slot still holds message seq - MPN_PAIR_SLOTS (this rank's host is
 * that far ahead of the peer's, in an earlier launch) is put off with every
 * later plan of its pair and side, and the others go first: the peer may be
 * waiting for them before it posts what frees the slot.  When only such
 * plans are left and some peer is another process, which catches up on its
 * own, the host waits for it, at most MPINCCL_AHEAD_TIMEOUT for the whole
 * launch, or until a communicator fails.  Then, or at once when every peer
 * left is of this process (the thread that would post its side may be this
 * one), the rest are posted anyway and refused (mpn_pair_post).  An abort
 * from another thread ends the wait; it frees the communicator only once
 * this launch is over (group.c).  A send that should push (push.h) waits
 * likewise, once everything else is posted, for its peer's receive, at most
 * MPINCCL_PUSH_WAIT_US for the launch, then posts as it is.
 */
static ncclResult_t post_all(plan_t* plans, int n, char* done, pair_side_t* held, int* current) {
  ncclResult_t first = ncclSuccess, why = ncclSuccess;
  int left = 0, give_up = 0, waiting = 0;
  for (int i = 0; i < n; i++) left += plans[i].prepared;
  uint64_t deadline = 0, push_deadline = 0;
  while (left > 0) {
    int nheld = 0, progress = 0, other_process = 0, pushing = 0;
    mpn_pair_graph_reap(); /* graphs destroyed meanwhile free their slots */
    for (int i = 0; i < n; i++) {
      plan_t* p = &plans[i];
      if (!p->prepared || done[i]) continue;
      /* (a graph slot this very capture holds is refused at once: no wait frees it) */
      int slot_busy = p->graph ? mpn_pair_graph_busy(p->pair, p->seq) &&
                                     !mpn_pair_graph_own(p->pair, p->seq, plan_side(p), p->op->capture_id)
                               : mpn_pair_slot_held(p->pair, p->seq, plan_side(p));
      int ahead = !give_up && ((nheld && pair_held(held, nheld, p)) || slot_busy);
      if (ahead || mpn_push_pending(p)) { /* later messages of the pair and side wait with it */
        if (!pair_held(held, nheld, p)) held[nheld++] = (pair_side_t){p->pair, plan_side(p)};
        /* (a graph's slot is freed by CUDA's thread, after a destroy: worth a wait with any peer) */
        other_process |= ahead && (p->op->comm->transport[p->op->peer] == MPN_TRANSPORT_IPC || p->graph);
        pushing |= !ahead;
        continue;
      }
      mpn_cuda_switch_device(current, p->op->comm->cuda_dev);
      mpn_keep(&first, plan_post(p));
      struct mpn_p2p* stats = p->op->comm->p2p;
      stats->posted += p->posted;
      stats->moved += p->posted && p->role == MPN_POST_SECOND;
      stats->pushed += p->posted && p->push && p->role == MPN_POST_SECOND;
      done[i] = 1;
      left--;
      progress = 1;
    }
    if (progress || left == 0) continue;
    if (pushing) { /* every other message is posted: wait for the peers' receives */
      if (!mpn_push_wait(plans, done, n, &push_deadline)) push_give_up(plans, done, n);
      continue;
    }
    if (!waiting && other_process) {
      waiting = 1;
      deadline = mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_AHEAD_TIMEOUT) * 1000000000ull;
      MPN_INFO(MPN_SUBSYS_P2P, "%d messages more than %d ahead of their peers; waiting for them to post", left,
               MPN_PAIR_SLOTS);
    }
    give_up = !other_process || !behind_wait(plans, done, n, deadline, &why);
  }
  if (why != ncclSuccess)
    mpn_error_set(NULL, why,
                  "messages more than %d ahead of their peers, or captured ones whose graph slots older graphs "
                  "still hold: %s",
                  MPN_PAIR_SLOTS,
                  why == ncclInvalidUsage ? "the peers did not post theirs, or the graphs were not destroyed, within "
                                            "MPINCCL_AHEAD_TIMEOUT, or the communicator was aborted"
                                          : "a communicator failed meanwhile");
  return why != ncclSuccess ? why : first;
}

/* A plan for each message within the host, in program order, numbered;
 * returns the first failure (every message is prepared all the same). */
static ncclResult_t prepare_all(plan_t* plans, mpn_op_t* ops, int* current) {
  ncclResult_t first_error = ncclSuccess;
  uint64_t launch = __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED);
  int i = 0;
  for (mpn_op_t* op = ops; op; op = op->next) {
    if (op->comm->transport[op->peer] == MPN_TRANSPORT_UCX) continue;
    plans[i].op = op;
    plans[i].launch = launch;
    mpn_cuda_switch_device(current, op->comm->cuda_dev);
    ncclResult_t res = plan_prepare(&plans[i], i ? &plans[i - 1] : NULL);
    i++;
    if (res != ncclSuccess && first_error == ncclSuccess) first_error = res;
  }
  return first_error;
}

/* With one other process of a time-sliced GPU: delegation or the inbox
 * (sliced.h), by the GPU work seen between launches.  Returns the plan
 * whose stream times that work (gap_time), or NULL. */
static const plan_t* choose_paths(plan_t* plans, int n, int* current) {
  int one_peer = mpn_sliced_one_peer(plans, n);
  const plan_t* timed = one_peer ? mpn_sliced_timed(plans, n) : NULL;
  int computes = timed && gap_time(timed, 0, current);
  int late = mpn_sliced_delegate_wait(plans, n, mpn_sliced_inbox(plans, n, one_peer, computes));
  if (late >= 0) plans[late].op->comm->p2p->delegate_timeouts++;
  return timed;
}

/* A launch's arrays, one entry per message within the host, zeroed.  A
 * launch of up to LAUNCH_HERE messages (a small group: every group of an
 * exchange with a few peers) keeps them on the stack, with no heap
 * allocation and free for each of them every group; a larger one takes
 * them from the heap. */
#define LAUNCH_HERE 16

typedef struct {
  plan_t* plans;
  plan_t** scratch;  /* for issuing (mpn_p2p_issue) */
  char* done;        /* post_all's: once prepared, every message's number is spent and must be posted */
  pair_side_t* held; /* post_all's */
  int heap;
  plan_t plans_here[LAUNCH_HERE];
  plan_t* scratch_here[LAUNCH_HERE];
  char done_here[LAUNCH_HERE];
  pair_side_t held_here[LAUNCH_HERE];
} launch_arrays_t;

static void launch_arrays_free(launch_arrays_t* a) {
  if (!a->heap) return;
  free(a->plans);
  free(a->scratch);
  free(a->done);
  free(a->held);
}

/* 0 when out of memory (nothing is held then). */
static int launch_arrays_make(launch_arrays_t* a, int n) {
  a->heap = n > LAUNCH_HERE;
  if (!a->heap) {
    memset(a->plans_here, 0, (size_t)n * sizeof(a->plans_here[0]));
    memset(a->scratch_here, 0, (size_t)n * sizeof(a->scratch_here[0]));
    memset(a->done_here, 0, (size_t)n);
    memset(a->held_here, 0, (size_t)n * sizeof(a->held_here[0]));
    a->plans = a->plans_here;
    a->scratch = a->scratch_here;
    a->done = a->done_here;
    a->held = a->held_here;
    return 1;
  }
  a->plans = calloc((size_t)n, sizeof(*a->plans));
  a->scratch = calloc((size_t)n, sizeof(*a->scratch));
  a->done = calloc((size_t)n, 1);
  a->held = calloc((size_t)n, sizeof(*a->held));
  if (a->plans && a->scratch && a->done && a->held) return 1;
  launch_arrays_free(a);
  return 0;
}

ncclResult_t mpn_p2p_launch(mpn_op_t* ops, int dev) {
  int n = 0;
  for (mpn_op_t* op = ops; op; op = op->next) /* checked by mpn_p2p_check */
    n += op->comm->transport[op->peer] != MPN_TRANSPORT_UCX;
  const mpn_driver_t* drv;
  MPN_CHECK(mpn_driver_get(&drv));
  /* Everything that can fail for want of memory before anything is enqueued. */
  mpn_op_t** net = NULL;
  int nnet = ucx_ops(ops, &net);
  launch_arrays_t arrays;
  int made = nnet >= 0 && launch_arrays_make(&arrays, n);
  if (!made) {
    free(net);
    return mpn_error_set(NULL, ncclSystemError, "out of memory");
  }
  plan_t* plans = arrays.plans;
  plan_t** scratch = arrays.scratch;
  char* done = arrays.done;
  pair_side_t* held = arrays.held;
#ifdef HAVE_UCX
  /* The lanes' work before the streams' waits for peers within the host (staged.c). */
  ncclResult_t forked = nnet ? mpn_ucx_staged_fork(net, nnet) : ncclSuccess;
  ncclResult_t staged = nnet ? mpn_ucx_staged_launch(net, nnet) : ncclSuccess;
  for (int k = 0; k < nnet; k++) mpn_drain_keep_event(net[k]->stream); /* their lanes join after the kernels */
#else
  ncclResult_t forked = ncclSuccess, staged = ncclSuccess; /* refused by the checks */
#endif
  int current = dev;
  ncclResult_t first_error = prepare_all(plans, ops, &current);
  self_same_stream(plans, n);
  mpn_eager_graph_by_launch(plans, n);
  mpn_push_mark(plans, n);
  const plan_t* timed = choose_paths(plans, n, &current);
  mpn_keep(&first_error, post_all(plans, n, done, held, &current));
  mpn_p2p_graphs_hold(plans, n, &current);
  ncclResult_t res = mpn_p2p_issue(drv, plans, scratch, n, &current);
  for (int i = 0; i < n; i++) /* stages of messages that failed: maybe in use, never reused */
    if (plans[i].stage) mpn_stage_put(plans[i].stage, NULL, MPN_STAGE_PINNED);
#ifdef HAVE_UCX
  if (nnet) mpn_keep(&staged, mpn_ucx_staged_join(net, nnet));
#endif
  if (timed) gap_time(timed, 1, &current); /* after the join: the lanes' time is not the rank's work */
  if (dev >= 0) mpn_cuda_switch_device(&current, dev);
  launch_arrays_free(&arrays);
  free(net);
  if (res == ncclSuccess) res = first_error;
  if (res == ncclSuccess) res = forked;
  return res != ncclSuccess ? res : staged;
}

/* comm's per-peer states (NULL while none are made), read as another
 * thread may be making them (peer_state). */
static peer_state_t* peers_of(const struct ncclComm* comm) {
  struct mpn_p2p* p2p = __atomic_load_n(&comm->p2p, __ATOMIC_ACQUIRE);
  return p2p ? __atomic_load_n(&p2p->peers, __ATOMIC_ACQUIRE) : NULL;
}

/* The pairs with peer in peers (comm's per-peer states, or NULL), send and
 * receive (NULL where none is made), read as another thread may be making
 * them (the watchdog, an abort). */
static void pairs_in(peer_state_t* peers, int peer, mpn_pair_t* pairs[2]) {
  pairs[0] = peers ? __atomic_load_n(&peers[peer].send, __ATOMIC_ACQUIRE) : NULL;
  pairs[1] = peers ? __atomic_load_n(&peers[peer].recv, __ATOMIC_ACQUIRE) : NULL;
}

/* The pairs of comm with peer (pairs_in); 0 when comm has no pairs at all. */
static int peer_pairs(const struct ncclComm* comm, int peer, mpn_pair_t* pairs[2]) {
  peer_state_t* peers = peers_of(comm);
  pairs_in(peers, peer, pairs);
  return peers != NULL;
}

void mpn_p2p_poll_errors(struct ncclComm* comm) {
  peer_state_t* peers = peers_of(comm);
  if (peers == NULL) return;
  for (int peer = 0; peer < comm->nranks; peer++) {
    peer_state_t* ps = &peers[peer];
    mpn_pair_t* pairs[2];
    pairs_in(peers, peer, pairs);
    for (int k = 0; k < 2; k++) {
      if (pairs[k] == NULL) continue;
      /* (k: this rank's side of pairs[k], MPN_SIDE_SEND of its pair to peer) */
      const mpn_pair_error_t* e = &pairs[k]->mem->error[k];
      uint64_t errors = __atomic_load_n(&e->count, __ATOMIC_ACQUIRE);
      /* (threads may poll at once, comm.c's comm_failed: one reports each error) */
      if (__atomic_exchange_n(&ps->errors_seen[k], errors, __ATOMIC_ACQ_REL) == errors) continue;
      ncclResult_t code = (ncclResult_t)__atomic_load_n(&e->code, __ATOMIC_RELAXED);
      if (code == ncclSuccess) code = ncclInvalidUsage;
      if (__atomic_load_n(&pairs[k]->mem->aborted, __ATOMIC_ACQUIRE))
        mpn_comm_set_broken(comm, code, "%s", e->text); /* its flags are released: later messages would move nothing */
      else
        mpn_comm_fail_async(comm, code, "%s", e->text);
    }
  }
}

void mpn_p2p_release_peer(struct ncclComm* comm, int peer) {
  mpn_pair_t* pairs[2];
  if (!peer_pairs(comm, peer, pairs)) return;
  int saved = mpn_cuda_device_enter(comm->cuda_dev);
  mpn_pair_release(pairs[0]);
  mpn_pair_release(pairs[1]);
  mpn_cuda_device_leave(saved); /* the caller's device, whichever thread it is */
}

void mpn_p2p_pairs_made(const struct ncclComm* comm, int peer, mpn_pair_t* pairs[2]) { peer_pairs(comm, peer, pairs); }

void mpn_p2p_counts(const struct ncclComm* comm, int peer, uint64_t out[2][2]) {
  peer_state_t* peers = peers_of(comm);
  const peer_state_t* ps = peers ? &peers[peer] : NULL;
  out[MPN_SIDE_SEND][0] = ps ? __atomic_load_n(&ps->send_seq, __ATOMIC_RELAXED) : 0;
  out[MPN_SIDE_SEND][1] = ps ? __atomic_load_n(&ps->graph_send_seq, __ATOMIC_RELAXED) : 0;
  out[MPN_SIDE_RECV][0] = ps ? __atomic_load_n(&ps->recv_seq, __ATOMIC_RELAXED) : 0;
  out[MPN_SIDE_RECV][1] = ps ? __atomic_load_n(&ps->graph_recv_seq, __ATOMIC_RELAXED) : 0;
}

int mpn_p2p_peer_aborted(const struct ncclComm* comm, int peer) {
  mpn_pair_t* pairs[2];
  peer_pairs(comm, peer, pairs);
  for (int k = 0; k < 2; k++)
    if (pairs[k] && __atomic_load_n(&pairs[k]->mem->aborted, __ATOMIC_ACQUIRE)) return 1;
  return 0;
}

void mpn_p2p_mark_aborted(struct ncclComm* comm, int peer) {
  for (int r = peer < 0 ? 0 : peer; r < (peer < 0 ? comm->nranks : peer + 1); r++) {
    mpn_pair_t* pairs[2];
    if (!peer_pairs(comm, r, pairs)) return;
    for (int k = 0; k < 2; k++)
      if (pairs[k]) __atomic_store_n(&pairs[k]->mem->aborted, 1, __ATOMIC_RELEASE);
  }
}

void mpn_p2p_abort(struct ncclComm* comm) {
  char text[128];
  snprintf(text, sizeof(text), "rank %d aborted its communicator; abort this one too", comm->rank);
  for (int peer = 0; peer < comm->nranks; peer++) {
    mpn_pair_t* pairs[2];
    if (!peer_pairs(comm, peer, pairs)) return;
    if (pairs[0] == NULL && pairs[1] == NULL) continue;
    mpn_p2p_mark_aborted(comm, peer); /* (done at the abort's start already; before the report the peer polls) */
    for (int k = 0; k < 2; k++)
      if (peer != comm->rank && pairs[k]) mpn_pair_report(pairs[k], k ^ 1, ncclRemoteError, text); /* (k: our side) */
    mpn_p2p_release_peer(comm, peer);
  }
}

void mpn_p2p_push_stats(const struct ncclComm* comm, uint64_t* pushed, uint64_t* timeouts) {
  const struct mpn_p2p* s = __atomic_load_n(&comm->p2p, __ATOMIC_ACQUIRE);
  *pushed = s ? s->pushed : 0;
  *timeouts = s ? s->push_timeouts : 0;
}

void mpn_p2p_stats(const struct ncclComm* comm, uint64_t eager[2], uint64_t* no_slot, uint64_t* slot_waits) {
  const struct mpn_p2p* s = __atomic_load_n(&comm->p2p, __ATOMIC_ACQUIRE);
  eager[0] = s ? s->eager[0] : 0;
  eager[1] = s ? s->eager[1] : 0;
  *no_slot = s ? s->no_slot : 0;
  if (slot_waits) *slot_waits = s ? s->slot_waits : 0;
}

void mpn_p2p_free(struct ncclComm* comm, int abandon) {
  if (comm->p2p == NULL) return;
  MPN_INFO(MPN_SUBSYS_P2P,
           "rank %d: %llu messages, %llu moved by this rank, %llu delegation waits "
           "ran out; %llu through the inbox's small slots, %llu its big ones, %llu captured through their graph "
           "slots' inbox, %llu found no free slot, "
           "%llu waited for one and got it, %llu in vain; %llu gaps between launches timed, the last %.0f us; "
           "%llu sends pushed after the peer's receive, %llu waits for it ran out",
           comm->rank, (unsigned long long)comm->p2p->posted, (unsigned long long)comm->p2p->moved,
           (unsigned long long)comm->p2p->delegate_timeouts, (unsigned long long)comm->p2p->eager[0],
           (unsigned long long)comm->p2p->eager[1], (unsigned long long)comm->p2p->eager[2],
           (unsigned long long)comm->p2p->no_slot, (unsigned long long)comm->p2p->slot_waits,
           (unsigned long long)comm->p2p->slot_timeouts, (unsigned long long)comm->p2p->gap.samples,
           (double)comm->p2p->gap.last_us, (unsigned long long)comm->p2p->pushed,
           (unsigned long long)comm->p2p->push_timeouts);
  if (comm->p2p->peers) {
    for (int peer = 0; peer < comm->nranks; peer++) {
      int elsewhere = comm->transport[peer] == MPN_TRANSPORT_IPC; /* (another process) */
      mpn_pair_t* pairs[2] = {comm->p2p->peers[peer].send, comm->p2p->peers[peer].recv};
      for (int k = 0; k < 2; k++)
        if (pairs[k] && abandon)
          mpn_pair_abandon(pairs[k]);
        else if (pairs[k])
          mpn_pair_unmap(pairs[k], elsewhere);
      mpn_slot_streams_free(&comm->p2p->peers[peer].streams[0]);
      mpn_slot_streams_free(&comm->p2p->peers[peer].streams[1]);
    }
  }
  mpn_gap_destroy(&comm->p2p->gap);
  mpn_lanes_destroy(&comm->p2p->lanes);
  free(comm->p2p->peers);
  free(comm->p2p);
  comm->p2p = NULL;
}
