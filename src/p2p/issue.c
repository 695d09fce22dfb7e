/*
 * issue.c - turns a launch's posted messages into stream work: memory
 * operations on the pair flags in batches, one kernel for the small copies
 * between ranks of one GPU, the copy engine for the others, and CUDA events
 * between ranks of one process under MPS.
 */
#include <stdint.h>
#include <string.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "cuda/device.h"
#include "core/param.h"
#include "cuda/copies.h"
#include "cuda/memop.h"
#include "cuda/syncs.h"
#include "cuda/event.h"
#include "p2p/plan.h"

/*
 * One flag operation of a plan.  Eager messages write their sequence number
 * and wait for at least it.  Graph messages write 1, wait for exactly 1 and
 * put the flag back to 0 right after, so that the next replay starts from
 * the same state: the second side clears "ready" before it copies, the first
 * clears "done" once it has seen it.
 */
static ncclResult_t plan_flag(mpn_memops_t* b, const plan_t* p, int done, int wait) {
  CUdeviceptr flag = mpn_pair_flag(p->pair, p->seq, p->graph, done);
  if (!p->graph) return mpn_memops_add(b, flag, p->seq, wait ? MPN_MEMOP_WAIT_GEQ : MPN_MEMOP_WRITE);
  MPN_CHECK(mpn_memops_add(b, flag, 1, wait ? MPN_MEMOP_WAIT_EQ : MPN_MEMOP_WRITE));
  return wait ? mpn_memops_add(b, flag, 0, MPN_MEMOP_WRITE) : ncclSuccess;
}

/* Imports used on stream s are idle again once it passes this point: one
 * event record for all of them (none while capturing: graphs pin them). */
static void mark_imports_used(plan_t* plans, int n, cudaStream_t s) {
  cudaEvent_t used = NULL;
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->imported || p->op->stream != s) continue;
    if (!p->graph && used == NULL && mpn_event_of_stream(s, p->op->comm->cuda_dev, &used) == ncclSuccess &&
        cudaEventRecord(used, s) != cudaSuccess) {
      cudaGetLastError();
      used = NULL;
    }
    mpn_ipc_mark_used(&p->ref, used, p->graph);
  }
}

/*
 * The copies this rank moves on stream s: messages up to
 * MPINCCL_COPY_KERNEL_MAX bytes between ranks of one GPU go through one
 * kernel launch per MPN_COPY_BATCH of them, the others each through the copy
 * engine.
 */

static ncclResult_t issue_copies(plan_t* plans, int n, cudaStream_t s) {
  ncclResult_t first = ncclSuccess;
  mpn_copies_t copies;
  mpn_copies_init(&copies, s);
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->posted || !p->move || p->op->stream != s) continue;
    /* The kernel reaches only memory of its own GPU (or mapped through IPC). */
    struct ncclComm* comm = p->op->comm;
    int same_gpu = mpn_topo_same_gpu(&comm->topo, comm->rank, p->op->peer);
    mpn_keep(&first, mpn_copies_add(&copies, p->dst, p->src, p->op->bytes, same_gpu));
  }
  mpn_keep(&first, mpn_copies_flush(&copies));
  mark_imports_used(plans, n, s);
  return first;
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
 * Issuing goes on past a failure: the first error is kept (mpn_keep) and
 * returned, but every posted plan still gets its flag writes and waits, so
 * that no peer waits for a flag this rank never writes (only copies are
 * lost).
 *
 * First half of the plans that use stream s: a memory-pool send buffer goes
 * to its stage; one batch with the "ready" writes (first side) and the waits
 * for the peers' "ready" (second side); the copies; one batch with the
 * "done" writes (second side).  Within a batch the operations run in order.
 */
static ncclResult_t issue_front(const mpn_driver_t* drv, plan_t* plans, int n, cudaStream_t s) {
  ncclResult_t first = ncclSuccess;
  mpn_memops_t b;
  mpn_memops_init(&b, drv, s);
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (p->stage && p->posted && p->op->stream == s && p->op->kind == MPN_OP_SEND)
      mpn_keep(&first, mpn_cuda_result(NULL, cudaMemcpyAsync(mpn_stage_ptr(p->stage), p->op->buf, p->op->bytes,
                                               cudaMemcpyDeviceToDevice, s),
                               "copying a send buffer to its stage"));
  }
  for (int i = 0; i < n; i++) { /* ready writes */
    plan_t* p = &plans[i];
    if (p->posted && p->op->stream == s && p->role == MPN_POST_FIRST) mpn_keep(&first, plan_flag(&b, p, 0, 0));
  }
  for (int i = 0; i < n; i++) { /* waits for ready */
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_SECOND) continue;
    if (p->ev) {
      mpn_keep(&first, mpn_cuda_result(NULL, cudaStreamWaitEvent(s, p->ev, 0), "cudaStreamWaitEvent"));
      mpn_event_put(p->ev_dev, p->ev);
      p->ev = NULL;
    } else {
      mpn_keep(&first, plan_flag(&b, p, 0, 1));
    }
  }
  mpn_keep(&first, mpn_memops_flush(&b));
  mpn_keep(&first, issue_copies(plans, n, s));
  for (int i = 0; i < n; i++) { /* done writes (and events) */
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_SECOND) continue;
    if (p->local) publish_done(p, s);
    mpn_keep(&first, plan_flag(&b, p, 1, 0));
  }
  mpn_keep(&first, mpn_memops_flush(&b));
  return first;
}

/* Second half: the waits for "done" (first side), then a memory-pool
 * receive buffer's data comes out of its stage. */
static ncclResult_t issue_back(const mpn_driver_t* drv, plan_t* plans, int n, cudaStream_t s) {
  ncclResult_t first = ncclSuccess;
  mpn_memops_t b;
  mpn_memops_init(&b, drv, s);
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_FIRST) continue;
    int dev = -1;
    cudaEvent_t done = p->local ? await_done(p, &dev) : NULL;
    ncclResult_t waited = done ? mpn_cuda_result(NULL, cudaStreamWaitEvent(s, done, 0), "cudaStreamWaitEvent")
                               : ncclInvalidUsage;
    if (done) mpn_event_put(dev, done);
    if (waited != ncclSuccess) mpn_keep(&first, plan_flag(&b, p, 1, 1)); /* the flag, then */
  }
  mpn_keep(&first, mpn_memops_flush(&b));
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    if (!p->stage || !p->posted || p->op->stream != s) continue;
    if (p->op->kind == MPN_OP_RECV)
      mpn_keep(&first, mpn_cuda_result(NULL, cudaMemcpyAsync(p->op->buf, mpn_stage_ptr(p->stage), p->op->bytes,
                                               cudaMemcpyDeviceToDevice, s),
                               "copying a stage to its receive buffer"));
    mpn_stage_put(p->stage, s, p->graph);
    p->stage = NULL;
  }
  return first;
}

/*
 * Streams whose every message is with a rank whose kernels run beside ours
 * (plan.spin) do each half as one kernel (cuda/sync.h) when its flags and
 * copies fit: the front writes "ready", polls the peers' "ready", copies and
 * writes "done"; the back polls "done".  Same order as the memory
 * operations, one stream item instead of three.  Each half decides for
 * itself: the kernel pays only with several waits (MPINCCL_KERNEL_SYNC_WAITS).
 */
static int stream_syncs(const plan_t* plans, int n, cudaStream_t s, int half) {
  size_t bytes = 0;
  int front = 0, back = 0, copies = 0, waits = 0;
  for (int i = 0; i < n; i++) {
    const plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s) continue;
    if (!p->spin || p->stage) return 0;
    waits += (p->role == MPN_POST_SECOND) == (half == 0);
    if (p->role == MPN_POST_FIRST) {
      front++, back++;
      continue;
    }
    front += 2;
    if (!p->move || p->op->bytes == 0) continue;
    struct ncclComm* comm = p->op->comm;
    if (!mpn_topo_same_gpu(&comm->topo, comm->rank, p->op->peer)) return 0; /* the engine's */
    bytes += p->op->bytes;
    copies++;
  }
  return waits >= mpn_param_int(MPN_PARAM_KERNEL_SYNC_WAITS) && bytes <= (size_t)mpn_param_int(MPN_PARAM_KERNEL_SYNC) &&
         front <= MPN_SYNC_FLAGS && back <= MPN_SYNC_FLAGS && copies <= MPN_SYNC_COPIES;
}

static void sync_flag(mpn_sync_t* k, const plan_t* p, int done, int kind) {
  k->flags[k->nfirst + k->nwait + k->nlast] =
      (mpn_sync_flag_t){mpn_pair_flag(p->pair, p->seq, 0, done), p->seq, (uint32_t)kind, 0};
}

static ncclResult_t issue_sync(const mpn_driver_t* drv, plan_t* plans, int n, cudaStream_t s, int half) {
  mpn_sync_t k;
  k.nfirst = k.nwait = k.ncopy = k.nlast = 0;
  for (int i = 0; i < n; i++) { /* front: "ready" writes; back: nothing first */
    plan_t* p = &plans[i];
    if (half == 0 && p->posted && p->op->stream == s && p->role == MPN_POST_FIRST)
      sync_flag(&k, p, 0, MPN_MEMOP_WRITE), k.nfirst++;
  }
  for (int i = 0; i < n; i++) { /* front: peers' "ready"; back: peers' "done" */
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != (half == 0 ? MPN_POST_SECOND : MPN_POST_FIRST))
      continue;
    sync_flag(&k, p, half, MPN_MEMOP_WAIT_GEQ), k.nwait++;
  }
  for (int i = 0; half == 0 && i < n; i++) { /* front: copies, "done" writes */
    plan_t* p = &plans[i];
    if (!p->posted || p->op->stream != s || p->role != MPN_POST_SECOND) continue;
    if (p->move && p->op->bytes) k.copies[k.ncopy++] = (mpn_copy_t){p->src, p->dst, p->op->bytes};
    sync_flag(&k, p, 1, MPN_MEMOP_WRITE), k.nlast++;
  }
  if (k.nfirst + k.nwait + k.nlast == 0) return ncclSuccess;
  ncclResult_t res = mpn_sync_issue(drv, &k, s);
  if (half == 0) mark_imports_used(plans, n, s);
  return res;
}

ncclResult_t mpn_p2p_issue(const mpn_driver_t* drv, plan_t* plans, int n) {
  ncclResult_t first = ncclSuccess;
  for (int half = 0; half < 2; half++)
    for (int i = 0; i < n; i++) {
      int seen = 0;
      for (int j = 0; j < i && !seen; j++) seen = plans[j].op->stream == plans[i].op->stream;
      if (seen) continue;
      cudaSetDevice(plans[i].op->comm->cuda_dev); /* a stream's work is issued on its device */
      cudaStream_t s = plans[i].op->stream;
      if (stream_syncs(plans, n, s, half))
        mpn_keep(&first, issue_sync(drv, plans, n, s, half));
      else
        mpn_keep(&first, half == 0 ? issue_front(drv, plans, n, s) : issue_back(drv, plans, n, s));
    }
  return first;
}
