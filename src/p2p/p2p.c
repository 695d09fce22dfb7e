/*
 * p2p.c - send/receive scheduling for peers reachable through shared memory
 * (self, same process, CUDA IPC on the same host).
 *
 * Every message meets its match in a pair slot (pair.h).  The side that
 * arrives second moves the data; the first only writes "ready" and waits for
 * "done".  A group is issued in three phases on each stream: all "ready"
 * writes, then the copies of the messages this rank moves (each waits for the
 * peer's "ready" and writes "done"), then the waits for "done".  Phase 2 and
 * 3 depend only on other ranks' phase 1 and 2, so any pattern of sends and
 * receives inside one group completes; and when one rank of a pair arrives
 * second for both directions it does both copies, so the other process needs
 * no copy or compute engine at all.  Messages enqueued while their stream is
 * captured in a CUDA graph use slots of their own whose flags go back to 0,
 * so that every replay repeats the same handshake.
 */
#include "p2p/p2p.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/copy.h"
#include "cuda/driver.h"
#include "cuda/event.h"
#include "p2p/pair.h"
#include "p2p/stage.h"
#include "transport.h"

typedef struct {
  mpn_pair_t *send, *recv; /* me -> peer, peer -> me */
  uint64_t send_seq, recv_seq;             /* eager messages */
  uint64_t graph_send_seq, graph_recv_seq; /* messages captured in graphs */
  uint64_t errors_seen[2];
} peer_state_t;

struct mpn_p2p {
  peer_state_t* peers; /* nranks, filled on first use */
};

/* One message of the group being launched. */
typedef struct {
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
  int local;          /* same process under MPS: streams ordered by events (see below) */
  cudaEvent_t ev;     /* local, second side: the first side's "posted" event to wait for */
  int ev_dev;
} plan_t;

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
    MPN_CHECK(mpn_pair_map(comm->bootstrap->key, comm->rank, peer, &pair));
    __atomic_store_n(&ps->send, pair, __ATOMIC_RELEASE);
  }
  if (ps->recv == NULL) {
    MPN_CHECK(mpn_pair_map(comm->bootstrap->key, peer, comm->rank, &pair));
    __atomic_store_n(&ps->recv, pair, __ATOMIC_RELEASE);
  }
  *out = ps;
  return ncclSuccess;
}

ncclResult_t mpn_p2p_connect_local(struct ncclComm* comm) {
  if (comm->cuda_dev < 0) return ncclSuccess;
  int saved = -1;
  cudaGetDevice(&saved);
  cudaSetDevice(comm->cuda_dev);
  ncclResult_t res = ncclSuccess;
  for (int peer = 0; peer < comm->nranks && res == ncclSuccess; peer++) {
    mpn_transport_kind_t t = comm->transport[peer];
    peer_state_t* ps;
    if (t == MPN_TRANSPORT_SELF || t == MPN_TRANSPORT_LOCAL) res = peer_state(comm, peer, &ps);
  }
  if (saved >= 0) cudaSetDevice(saved);
  return res;
}

/* Leaves an error for the pair's other process (see mpn_p2p_poll_errors). */
static void pair_report(mpn_pair_t* pair, ncclResult_t code, const char* text) {
  mpn_pair_mem_t* mem = pair->mem;
  snprintf(mem->error, sizeof(mem->error), "%s", text);
  __atomic_store_n(&mem->error_code, (uint32_t)code, __ATOMIC_RELAXED);
  __atomic_fetch_add(&mem->errors, 1, __ATOMIC_RELEASE);
}

/* Records a mismatch where both sides find it (peer through the pair). */
static void report_mismatch(plan_t* p, const mpn_side_t* mine, const mpn_side_t* other) {
  const mpn_op_t* op = p->op;
  int send = op->kind == MPN_OP_SEND;
  const mpn_side_t* s = send ? mine : other;
  const mpn_side_t* r = send ? other : mine;
  char text[256];
  snprintf(text, sizeof(text),
           "message %llu from rank %d to rank %d: ncclSend of %llu x %s, ncclRecv of %llu x %s",
           (unsigned long long)p->seq, send ? op->comm->rank : op->peer,
           send ? op->peer : op->comm->rank, (unsigned long long)s->count,
           mpn_dtype_name((ncclDataType_t)s->dtype), (unsigned long long)r->count,
           mpn_dtype_name((ncclDataType_t)r->dtype));
  pair_report(p->pair, ncclInvalidUsage, text);
  mpn_error_set(op->comm, ncclInvalidUsage, "%s", text);
  mpn_comm_set_async(op->comm, ncclInvalidUsage);
}

/* Tells the message's other side that this side failed and moved nothing:
 * its "done" still comes (nobody hangs), and ncclCommGetAsyncError says why. */
static void report_failed_move(plan_t* p, ncclResult_t res) {
  const mpn_op_t* op = p->op;
  int send = op->kind == MPN_OP_SEND;
  char text[256];
  snprintf(text, sizeof(text),
           "message %llu from rank %d to rank %d: rank %d could not reach the other buffer "
           "and moved no data (%s)",
           (unsigned long long)p->seq, send ? op->comm->rank : op->peer,
           send ? op->peer : op->comm->rank, op->comm->rank, ncclGetErrorString(res));
  pair_report(p->pair, ncclRemoteError, text);
  mpn_comm_set_async(op->comm, res);
}

/* This side's descriptor; on failure a descriptor that tells the peer to
 * skip.  A memory-pool buffer, which CUDA IPC cannot share, is described by
 * a stage of the same size (used only if this side arrives first). */
static ncclResult_t describe(plan_t* p, mpn_side_t* d) {
  const mpn_op_t* op = p->op;
  memset(d, 0, sizeof(*d));
  d->proc = mpn_chan_proc_id();
  d->ptr = (uint64_t)(uintptr_t)op->buf;
  d->bytes = op->bytes;
  d->count = op->count;
  d->dtype = op->dtype;
  if (p->local) { /* where this side's stream stands (used if it arrives first) */
    cudaEvent_t ev = NULL;
    int dev = op->comm->cuda_dev;
    if (mpn_event_get(dev, &ev) == ncclSuccess && cudaEventRecord(ev, op->stream) == cudaSuccess) {
      d->event = (uint64_t)(uintptr_t)ev;
      d->event_dev = dev;
    } else {
      cudaGetLastError();
      mpn_event_put(dev, ev);
    }
  }
  if (op->comm->transport[op->peer] != MPN_TRANSPORT_IPC) return ncclSuccess;
  const void* shared = op->buf;
  ncclResult_t res = ncclSuccess;
  if (op->bytes > 0 && mpn_stage_needed(op->buf)) {
    res = mpn_stage_get(op->bytes, &p->stage);
    if (res == ncclSuccess) shared = mpn_stage_ptr(p->stage);
  }
  if (res == ncclSuccess)
    res = mpn_ipc_export(shared, op->kind == MPN_OP_SEND ? "sendbuff" : "recvbuff", &d->ipc);
  d->exported = res == ncclSuccess ? 1 : -1;
  return res;
}

/* Where the peer's buffer is, in this process. */
static ncclResult_t resolve(plan_t* p, const mpn_side_t* other, void** ptr) {
  if (other->proc == mpn_chan_proc_id()) {
    *ptr = (void*)(uintptr_t)other->ptr;
    return ncclSuccess;
  }
  MPN_CHECK(mpn_ipc_import(other->proc, &other->ipc, ptr, &p->ref));
  p->imported = 1;
  return ncclSuccess;
}

/* Finds the message's pair and number. */
static ncclResult_t plan_prepare(plan_t* p) {
  mpn_op_t* op = p->op;
  peer_state_t* ps = NULL;
  MPN_CHECK(peer_state(op->comm, op->peer, &ps));
  int send = op->kind == MPN_OP_SEND;
  p->pair = send ? ps->send : ps->recv;
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  p->graph = cudaStreamIsCapturing(op->stream, &cap) == cudaSuccess && cap == cudaStreamCaptureStatusActive;
  uint64_t* counter = p->graph ? (send ? &ps->graph_send_seq : &ps->graph_recv_seq)
                               : (send ? &ps->send_seq : &ps->recv_seq);
  p->seq = ++*counter;
  const mpn_topo_t* t = &op->comm->topo;
  mpn_transport_kind_t kind = op->comm->transport[op->peer];
  p->local = !p->graph && (kind == MPN_TRANSPORT_SELF || kind == MPN_TRANSPORT_LOCAL) &&
             (t->ranks[op->comm->rank].mps || t->ranks[op->peer].mps);
  p->prepared = 1;
  return ncclSuccess;
}

/*
 * Of two ranks of different processes that share a GPU, the lower one moves
 * the data of both directions whenever the other has posted its side first:
 * then only one process needs the GPU's engines in an exchange, and without
 * MPS that saves a context switch (the "delegated" floor of the benchmark).
 * So before posting, such a rank waits on the host, at most
 * MPINCCL_DELEGATE_WAIT_US for the whole launch, for its peers' posts; a
 * peer that comes later than that simply finds itself second and copies.
 */
static int delegates(const plan_t* p) {
  const mpn_op_t* op = p->op;
  const struct ncclComm* comm = op->comm;
  return p->prepared && comm->transport[op->peer] == MPN_TRANSPORT_IPC && comm->rank < op->peer &&
         mpn_topo_same_gpu(&comm->topo, comm->rank, op->peer);
}

static void delegate_wait(const plan_t* plans, int n) {
  int64_t budget_us = mpn_param_int(MPN_PARAM_DELEGATE_WAIT);
  uint64_t deadline = 0;
  for (int i = 0; i < n && budget_us > 0; i++) {
    const plan_t* p = &plans[i];
    if (!delegates(p)) continue;
    int side = p->op->kind == MPN_OP_SEND ? MPN_SIDE_SEND : MPN_SIDE_RECV;
    if (deadline == 0) deadline = mpn_chan_now_ns() + (uint64_t)budget_us * 1000;
    while (!mpn_pair_peer_posted(p->pair, p->seq, p->graph, side))
      if (mpn_chan_now_ns() > deadline) return;
  }
}

/* Posts one message; any failure still leaves a posted slot so nobody hangs. */
static ncclResult_t plan_post(plan_t* p) {
  mpn_op_t* op = p->op;
  struct ncclComm* comm = op->comm;
  int send = op->kind == MPN_OP_SEND;
  mpn_side_t mine;
  ncclResult_t bad = describe(p, &mine);
  int side = send ? MPN_SIDE_SEND : MPN_SIDE_RECV;
  MPN_CHECK(mpn_pair_post(p->pair, p->seq, p->graph, side, &mine, &p->role));
  p->posted = 1;
  if (p->role != MPN_POST_SECOND) return bad;
  if (p->stage) { /* second: this side copies from or to its own buffer directly */
    mpn_stage_put(p->stage, NULL, 0);
    p->stage = NULL;
  }
  mpn_side_t other = mpn_pair_slot(p->pair, p->seq, p->graph)->side[side ^ 1];
  mpn_pair_consume(p->pair, p->seq, p->graph);
  if (p->local) { /* own event unused; the first side's is waited for, then given back */
    mpn_event_put(mine.event_dev, (cudaEvent_t)(uintptr_t)mine.event);
    p->ev = (cudaEvent_t)(uintptr_t)other.event;
    p->ev_dev = other.event_dev;
  }
  if (other.exported < 0) {
    /* The peer could not share its buffer (and was told so): nothing moves. */
    mpn_error_set(comm, ncclInvalidUsage,
                  "message %llu with rank %d: the peer's buffer cannot be shared with this process",
                  (unsigned long long)p->seq, op->peer);
    mpn_comm_set_async(comm, ncclInvalidUsage);
  }
  if (bad != ncclSuccess || other.exported < 0) return bad;
  if (other.count != mine.count || other.dtype != mine.dtype) {
    report_mismatch(p, &mine, &other);
    return ncclSuccess;
  }
  void* far;
  ncclResult_t res = resolve(p, &other, &far);
  if (res != ncclSuccess) {
    report_failed_move(p, res);
    return res;
  }
  p->src = send ? op->buf : far;
  p->dst = send ? far : op->buf;
  p->move = mine.bytes > 0;
  return ncclSuccess;
}

/* Memory operations collected for one cuStreamBatchMemOp call. */
typedef struct {
  CUstreamBatchMemOpParams ops[128];
  unsigned n;
} batch_t;

static ncclResult_t batch_flush(const mpn_driver_t* drv, CUstream s, batch_t* b) {
  if (b->n) MPN_CU_CHECK(drv, stream_batch_mem_op(s, b->n, b->ops, 0));
  b->n = 0;
  return ncclSuccess;
}

static ncclResult_t batch_add(const mpn_driver_t* drv, CUstream s, batch_t* b, CUdeviceptr addr,
                              uint64_t value, int wait) {
  CUstreamBatchMemOpParams* op = &b->ops[b->n++];
  memset(op, 0, sizeof(*op));
  if (wait) {
    op->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    op->waitValue.address = addr;
    op->waitValue.value64 = value;
    op->waitValue.flags = wait == 2 ? CU_STREAM_WAIT_VALUE_EQ : CU_STREAM_WAIT_VALUE_GEQ;
  } else {
    op->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op->writeValue.address = addr;
    op->writeValue.value64 = value;
  }
  return b->n + 1 >= sizeof(b->ops) / sizeof(b->ops[0]) ? batch_flush(drv, s, b) : ncclSuccess;
}

/*
 * One flag operation of a plan.  Eager messages write their sequence number
 * and wait for at least it.  Graph messages write 1, wait for exactly 1 and
 * put the flag back to 0 right after, so that the next replay starts from
 * the same state: the second side clears "ready" before it copies, the first
 * clears "done" once it has seen it.
 */
static ncclResult_t plan_flag(const mpn_driver_t* drv, CUstream s, batch_t* b, const plan_t* p,
                              int done, int wait) {
  CUdeviceptr flag = mpn_pair_flag(p->pair, p->seq, p->graph, done);
  if (!p->graph) return batch_add(drv, s, b, flag, p->seq, wait);
  MPN_CHECK(batch_add(drv, s, b, flag, 1, wait ? 2 : 0));
  return wait ? batch_add(drv, s, b, flag, 0, 0) : ncclSuccess;
}

/*
 * The copies this rank moves on stream s: messages up to
 * MPINCCL_COPY_KERNEL_MAX bytes between ranks of one GPU go through one
 * kernel launch per MPN_COPY_BATCH of them, the others each through the copy
 * engine.
 */
static ncclResult_t issue_copies(plan_t* plans, int n, cudaStream_t s) {
  size_t kernel_max = (size_t)mpn_param_int(MPN_PARAM_COPY_KERNEL_MAX);
  mpn_copy_t batch[MPN_COPY_BATCH];
  int nb = 0;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->posted || !p->move || p->op->stream != s) continue;
    /* The kernel reaches only memory of its own GPU (or mapped through IPC). */
    struct ncclComm* comm = p->op->comm;
    int same_gpu = mpn_topo_same_gpu(&comm->topo, comm->rank, p->op->peer);
    if (p->op->bytes > kernel_max || !same_gpu) {
      MPN_CUDA_CHECK(cudaMemcpyAsync(p->dst, p->src, p->op->bytes, cudaMemcpyDefault, s));
      continue;
    }
    batch[nb++] = (mpn_copy_t){p->src, p->dst, p->op->bytes};
    if (nb == MPN_COPY_BATCH) {
      MPN_CUDA_CHECK(mpn_copy_batch_launch(batch, nb, s));
      nb = 0;
    }
  }
  if (nb) MPN_CUDA_CHECK(mpn_copy_batch_launch(batch, nb, s));
  for (int i = 0; i < n; i++)
    if (plans[i].imported && plans[i].op->stream == s) mpn_ipc_mark_used(&plans[i].ref, s, plans[i].graph);
  return ncclSuccess;
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
 * MPINCCL_LOCAL_WAIT_US falls back to waiting for the flag.  A launch issues
 * every stream's first half before any stream's second half, so one thread
 * driving several ranks never waits for itself.
 */
static void publish_done(plan_t* p, cudaStream_t s) {
  cudaEvent_t ev = NULL;
  int dev = p->op->comm->cuda_dev;
  if (mpn_event_get(dev, &ev) != ncclSuccess || cudaEventRecord(ev, s) != cudaSuccess) {
    cudaGetLastError();
    mpn_event_put(dev, ev);
    return; /* the first side falls back to the flag */
  }
  mpn_slot_t* slot = mpn_pair_slot(p->pair, p->seq, p->graph);
  slot->done_event = (uint64_t)(uintptr_t)ev;
  slot->done_dev = dev;
  __atomic_store_n(&slot->done_seq, p->seq, __ATOMIC_RELEASE);
}

/* First side: the second side's "done" event, once published, or NULL. */
static cudaEvent_t await_done(const plan_t* p, int* dev) {
  mpn_slot_t* slot = mpn_pair_slot(p->pair, p->seq, p->graph);
  uint64_t deadline = mpn_chan_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_LOCAL_WAIT) * 1000;
  while (__atomic_load_n(&slot->done_seq, __ATOMIC_ACQUIRE) != p->seq)
    if (mpn_chan_now_ns() > deadline) {
      MPN_INFO(MPN_SUBSYS_P2P, "message %llu with rank %d: no done event after %lld us; waiting "
               "for the flag", (unsigned long long)p->seq, p->op->peer,
               (long long)mpn_param_int(MPN_PARAM_LOCAL_WAIT));
      return NULL;
    }
  *dev = slot->done_dev;
  return (cudaEvent_t)(uintptr_t)slot->done_event;
}

/*
 * First half of the plans that use stream s: a memory-pool send buffer goes
 * to its stage; one batch with the "ready" writes (first side) and the waits
 * for the peers' "ready" (second side); the copies; one batch with the
 * "done" writes (second side).  Within a batch the operations run in order.
 */
static ncclResult_t issue_front(const mpn_driver_t* drv, plan_t* plans, int n, cudaStream_t s) {
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (p->stage && p->posted && p->op->stream == s && p->op->kind == MPN_OP_SEND)
      MPN_CUDA_CHECK(cudaMemcpyAsync(mpn_stage_ptr(p->stage), p->op->buf, p->op->bytes,
                                     cudaMemcpyDeviceToDevice, s));
  }
  batch_t b;
  b.n = 0;
  for (int i = 0; i < n; i++) { /* ready writes */
    plan_t* p = &plans[i];
    if (p->posted && p->op->stream == s && p->role == MPN_POST_FIRST)
      MPN_CHECK(plan_flag(drv, (CUstream)s, &b, p, 0, 0));
  }
  for (int i = 0; i < n; i++) { /* waits for ready */
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_SECOND) continue;
    if (p->ev) {
      MPN_CUDA_CHECK(cudaStreamWaitEvent(s, p->ev, 0));
      mpn_event_put(p->ev_dev, p->ev);
      p->ev = NULL;
    } else {
      MPN_CHECK(plan_flag(drv, (CUstream)s, &b, p, 0, 1));
    }
  }
  MPN_CHECK(batch_flush(drv, (CUstream)s, &b));
  MPN_CHECK(issue_copies(plans, n, s));
  for (int i = 0; i < n; i++) { /* done writes (and events) */
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_SECOND) continue;
    if (p->local) publish_done(p, s);
    MPN_CHECK(plan_flag(drv, (CUstream)s, &b, p, 1, 0));
  }
  return batch_flush(drv, (CUstream)s, &b);
}

/* Second half: the waits for "done" (first side), then a memory-pool
 * receive buffer's data comes out of its stage. */
static ncclResult_t issue_back(const mpn_driver_t* drv, plan_t* plans, int n, cudaStream_t s) {
  batch_t b;
  b.n = 0;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_FIRST) continue;
    int dev = -1;
    cudaEvent_t done = p->local ? await_done(p, &dev) : NULL;
    if (done) {
      MPN_CUDA_CHECK(cudaStreamWaitEvent(s, done, 0));
      mpn_event_put(dev, done);
    } else {
      MPN_CHECK(plan_flag(drv, (CUstream)s, &b, p, 1, 1));
    }
  }
  MPN_CHECK(batch_flush(drv, (CUstream)s, &b));
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->stage || !p->posted || p->op->stream != s) continue;
    if (p->op->kind == MPN_OP_RECV)
      MPN_CUDA_CHECK(cudaMemcpyAsync(p->op->buf, mpn_stage_ptr(p->stage), p->op->bytes,
                                     cudaMemcpyDeviceToDevice, s));
    mpn_stage_put(p->stage, s, p->graph);
    p->stage = NULL;
  }
  return ncclSuccess;
}

/* Issues the first half of every stream of the group, then the second. */
static ncclResult_t issue_all(const mpn_driver_t* drv, plan_t* plans, int n) {
  for (int half = 0; half < 2; half++)
    for (int i = 0; i < n; i++) {
      int seen = 0;
      for (int j = 0; j < i && !seen; j++) seen = plans[j].op->stream == plans[i].op->stream;
      if (seen) continue;
      cudaSetDevice(plans[i].op->comm->cuda_dev); /* a stream's work is issued on its device */
      cudaStream_t s = plans[i].op->stream;
      MPN_CHECK(half == 0 ? issue_front(drv, plans, n, s) : issue_back(drv, plans, n, s));
    }
  return ncclSuccess;
}

/* Refusals that must come before a message is posted. */
static ncclResult_t op_precheck(const mpn_op_t* op) {
  struct ncclComm* comm = op->comm;
  const char* fn = op->kind == MPN_OP_SEND ? "ncclSend" : "ncclRecv";
  if (comm->cuda_dev < 0)
    return mpn_error_set(comm, ncclInvalidUsage, "%s: comm %p has no CUDA device", fn, (void*)comm);
  if (comm->transport[op->peer] == MPN_TRANSPORT_UCX)
    return mpn_error_set(comm, ncclInvalidUsage,
                         "%s with peer %d: the UCX transport (other hosts, or forced by "
                         "MPINCCL_TRANSPORT=ucx / NCCL_P2P_DISABLE=1) is not available in this "
                         "version of mpinccl",
                         fn, op->peer);
  return ncclSuccess;
}

ncclResult_t mpn_p2p_launch(mpn_op_t* ops) {
  int n = 0;
  for (mpn_op_t* op = ops; op; op = op->next) {
    MPN_CHECK(op_precheck(op));
    n++;
  }
  const mpn_driver_t* drv;
  MPN_CHECK(mpn_driver_get(&drv));
  plan_t* plans = calloc((size_t)n, sizeof(*plans));
  if (plans == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  int saved = -1;
  cudaGetDevice(&saved);
  ncclResult_t first_error = ncclSuccess;
  int i = 0;
  for (mpn_op_t* op = ops; op; op = op->next, i++) {
    plans[i].op = op;
    cudaSetDevice(op->comm->cuda_dev);
    ncclResult_t res = plan_prepare(&plans[i]);
    if (res != ncclSuccess && first_error == ncclSuccess) first_error = res;
  }
  delegate_wait(plans, n);
  for (i = 0; i < n; i++) {
    if (!plans[i].prepared) continue;
    cudaSetDevice(plans[i].op->comm->cuda_dev);
    ncclResult_t res = plan_post(&plans[i]);
    if (res != ncclSuccess && first_error == ncclSuccess) first_error = res;
  }
  ncclResult_t res = issue_all(drv, plans, n);
  for (i = 0; i < n; i++) /* stages of messages that failed: maybe in use, never reused */
    if (plans[i].stage) mpn_stage_put(plans[i].stage, NULL, 1);
  if (saved >= 0) cudaSetDevice(saved);
  free(plans);
  return res != ncclSuccess ? res : first_error;
}

void mpn_p2p_poll_errors(struct ncclComm* comm) {
  if (comm->p2p == NULL || comm->p2p->peers == NULL) return;
  for (int peer = 0; peer < comm->nranks; peer++) {
    peer_state_t* ps = &comm->p2p->peers[peer];
    mpn_pair_t* pairs[2] = {ps->send, ps->recv};
    for (int k = 0; k < 2; k++) {
      if (pairs[k] == NULL) continue;
      uint64_t errors = __atomic_load_n(&pairs[k]->mem->errors, __ATOMIC_ACQUIRE);
      if (errors == ps->errors_seen[k]) continue;
      ps->errors_seen[k] = errors;
      ncclResult_t code = (ncclResult_t)__atomic_load_n(&pairs[k]->mem->error_code, __ATOMIC_RELAXED);
      if (code == ncclSuccess) code = ncclInvalidUsage;
      mpn_error_set(comm, code, "%s", pairs[k]->mem->error);
      mpn_comm_set_async(comm, code);
    }
  }
}

/* Device flags are written with a copy on a stream of the caller's own, which
 * depends on no stream that may be waiting. */
static void pair_release_device(mpn_pair_t* pair) {
  static uint64_t values[MPN_PAIR_FLAGS];
  for (int i = 0; i < MPN_PAIR_FLAGS; i++) values[i] = i < 2 * MPN_PAIR_SLOTS ? UINT64_MAX >> 1 : 1;
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    MPN_WARN("cannot release the device flags of %s", pair->name);
    return;
  }
  cudaMemcpyAsync((void*)pair->dflags, values, sizeof(values), cudaMemcpyHostToDevice, s);
  cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  cudaGetLastError();
}

/* Satisfies every wait on a pair: eager waits are "at least", graph waits "exactly 1". */
static void pair_release(mpn_pair_t* pair) {
  if (pair == NULL) return;
  if (pair->dflags) {
    pair_release_device(pair);
    return;
  }
  for (int i = 0; i < MPN_PAIR_SLOTS; i++) {
    __atomic_store_n(&pair->mem->slots[i].ready, UINT64_MAX >> 1, __ATOMIC_RELEASE);
    __atomic_store_n(&pair->mem->slots[i].done, UINT64_MAX >> 1, __ATOMIC_RELEASE);
  }
  for (int i = 0; i < MPN_PAIR_GRAPH_SLOTS; i++) {
    __atomic_store_n(&pair->mem->graph_slots[i].ready, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&pair->mem->graph_slots[i].done, 1, __ATOMIC_RELEASE);
  }
}

void mpn_p2p_release_peer(struct ncclComm* comm, int peer) {
  struct mpn_p2p* p2p = __atomic_load_n(&comm->p2p, __ATOMIC_ACQUIRE);
  peer_state_t* peers = p2p ? __atomic_load_n(&p2p->peers, __ATOMIC_ACQUIRE) : NULL;
  if (peers == NULL) return;
  if (comm->cuda_dev >= 0) cudaSetDevice(comm->cuda_dev);
  pair_release(__atomic_load_n(&peers[peer].send, __ATOMIC_ACQUIRE));
  pair_release(__atomic_load_n(&peers[peer].recv, __ATOMIC_ACQUIRE));
}

void mpn_p2p_free(struct ncclComm* comm) {
  if (comm->p2p == NULL) return;
  if (comm->p2p->peers) {
    for (int peer = 0; peer < comm->nranks; peer++) {
      if (comm->p2p->peers[peer].send) mpn_pair_unmap(comm->p2p->peers[peer].send);
      if (comm->p2p->peers[peer].recv) mpn_pair_unmap(comm->p2p->peers[peer].recv);
    }
  }
  free(comm->p2p->peers);
  free(comm->p2p);
  comm->p2p = NULL;
}
