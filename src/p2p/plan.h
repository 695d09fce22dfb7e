/*
 * plan.h - one message of a group being launched, as the send/receive
 * scheduler (p2p.c) posts it and the issuer (issue.c) turns it into stream
 * work.  Private to src/p2p.
 */
#ifndef MPN_P2P_PLAN_H_
#define MPN_P2P_PLAN_H_

#include <cuda.h>
#include <cuda_runtime.h>

#include "core/enqueue.h"
#include "cuda/copy.h"
#include "cuda/driver.h"
#include "cuda/ipc.h"
#include "p2p/eager.h"
#include "p2p/pair.h"
#include "p2p/stage.h"

/* One message of the group being launched. */
typedef struct mpn_plan {
  mpn_op_t* op;
  mpn_pair_t* pair;
  uint64_t seq;
  int posted;      /* the slot is ours: its flags must be issued */
  int graph;       /* captured: flags return to 0, so every replay works */
  mpn_post_role_t role;
  void *src, *dst; /* second side: where the data moves */
  int move;        /* second side and both descriptors valid */
  int prepared;    /* pair and seq known */
  int imported;    /* the peer's buffer came through CUDA IPC: ref names it */
  mpn_ipc_ref_t ref;
  mpn_stage_t* stage; /* own buffer from a memory pool: the peer sees this instead */
  int local;          /* same process under MPS: streams ordered by events (issue.c) */
  int spin;           /* the peer's kernels run beside ours: flags may be polled by a kernel */
  cudaEvent_t ev;     /* local, second side: the first side's "posted" event to wait for */
  int ev_dev;
  int eager_ok;       /* the inbox ring (eager.h, MPN_EAGER_*) this side would take if it posts first, or 0 */
  int eager;          /* the ring the message goes through (src/dst name its slot, bytes below), or 0 */
  size_t eager_bytes; /* send: bytes copied in; receive: most bytes copied out */
  uint64_t eager_n;   /* its number among the pair's eager messages (eager.h) */
  uint64_t launch;    /* which launch of the process posts it (p2p.c) */
  uint64_t peer_proc;  /* second side: the process that posted the first side ... */
  uint64_t peer_launch; /* ... and which of its launches (numbered per process) */
  int step;           /* second side of a two-hop message: its step of the front half (issue.c) */
  int chain;          /* ... and the stream its process's steps go on, where they fork (issue.c) */
  int after_prev;     /* the slot's previous message was posted on another stream (p2p.c; plan_gated) */
  int push;           /* a send that posts after the peer's receive, so that it moves its own data (push.h) */
  const struct mpn_plan* self_other; /* a message to the rank itself: its other side's plan, when that is in
                                        this launch on the same stream (p2p.c, self_same_stream), else NULL */
  unsigned long long stream_id; /* mpn_cuda_stream_id of op->stream */
} plan_t;

/** The pair side of p's message (MPN_SIDE_SEND or MPN_SIDE_RECV). */
static inline int plan_side(const plan_t* p) { return p->op->kind == MPN_OP_SEND ? MPN_SIDE_SEND : MPN_SIDE_RECV; }

/** Fails both sides' communicators with text: the peer's through the pair,
 *  this one's as its last error and asynchronous error. */
void mpn_plan_report_both(plan_t* p, ncclResult_t code, const char* text);

/** The flag of a captured message through its graph slot's inbox: 1 while
 *  the slot holds a replay's data (eager.h); its sender waits for bit 0
 *  clear (MPN_PAIR_GRAPH_FREE), its receiver for at least 1. */
static inline CUdeviceptr plan_graph_full(const plan_t* p) { return mpn_pair_flag(p->pair, p->seq, 1, 1); }

/** An eager message's copy: into the inbox with its size word, or out of it
 *  limited by that word.  0 when nothing is to be copied. */
static inline int plan_eager_copy(const plan_t* p, mpn_copy_t* c) {
  int send = p->op->kind == MPN_OP_SEND;
  if (!p->eager || (!send && p->eager_bytes == 0)) return 0;
  unsigned long long* size = (unsigned long long*)(uintptr_t)mpn_eager_size(p->pair, p->eager, p->eager_n);
  *c = (mpn_copy_t){p->src, p->dst, p->eager_bytes, send ? NULL : size, send ? size : NULL};
  return 1;
}

/**
 * Whether p must wait for the "done" of its slot's previous message, posted
 * on another stream (p2p.c): where p's own first flag write would not
 * otherwise come after it.  A first side writes "ready" and an eager send
 * "done" straight away; a second side of the two-hop path writes only after
 * its wait for the first side's "ready", which that side's gate orders, and
 * an eager receive writes no pair flag.  Not between ranks of one process
 * under MPS, whose streams are ordered by events only (a memory wait could
 * block the stream that writes the flag): there the flags of k and k + 512
 * may still land in either order, which only a fallback to the flags reads.
 */
static inline int plan_gated(const plan_t* p) {
  if (!p->after_prev || p->local) return 0;
  return p->eager ? p->op->kind == MPN_OP_SEND : p->role == MPN_POST_FIRST;
}

/** Imports used on stream s are idle again once it passes this point: one
 *  event record for all of them (captured: each held while its graph lives). */
void mpn_plan_imports_used(plan_t* plans, int n, cudaStream_t s);

/**
 * Issues the posted plans on their streams: every stream's first half (the
 * "ready" handshake, the copies this rank moves, the "done" writes), then
 * every stream's second half (the waits for "done").  scratch has room for n
 * pointers (the launch allocates it with the plans, so that issuing needs
 * no memory).  *current_device is the caller's current device, kept up to
 * date.
 */
ncclResult_t mpn_p2p_issue(const mpn_driver_t* drv, plan_t* plans, plan_t** scratch, int n, int* current_device);

/** Hangs on each graph being captured a record of the graph slots its
 *  posted plans took, which gives them back when the graph is destroyed
 *  (graphs.c). */
void mpn_p2p_graphs_hold(plan_t* plans, int n, int* current_device);

#endif /* MPN_P2P_PLAN_H_ */
