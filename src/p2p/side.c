/*
 * side.c - one side of a message between processes of a host: what this
 * rank tells the peer of its buffer (an IPC export, or a stage where the
 * peer cannot map it), and where the peer's buffer is here (an import).
 */
#include "p2p/side.h"

#include <string.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/buffer.h"
#include "cuda/event.h"
#include "cuda/ipc_held.h"
#include "transport.h"

/* A buffer that CUDA IPC shares is one cudaMalloc allocation: a message
 * running past its end would make the copy read or write whatever lies
 * beyond (another allocation), so it is refused, as a window is
 * (rma/window.c); nothing moves and the peer is told. */
static const char* op_fn(const mpn_op_t* op) { return op->kind == MPN_OP_SEND ? "ncclSend" : "ncclRecv"; }

static ncclResult_t extent_check(const mpn_op_t* op, const char* name, const mpn_ipc_desc_t* ipc) {
  if (op->bytes <= ipc->size - ipc->offset) return ncclSuccess; /* (export gives offset <= size) */
  return mpn_error_set(op->comm, ncclInvalidArgument,
                       "%s: %s %p + %zu bytes runs past the end of its allocation (%llu bytes from 0x%llx)", op_fn(op),
                       name, op->buf, op->bytes, (unsigned long long)ipc->size, (unsigned long long)ipc->base);
}

/* The check of a buffer that no export judged (cuda/buffer.h), where
 * MPINCCL_CHECK_BUFFERS asks for it. */
static ncclResult_t range_check(const mpn_op_t* op, const char* name) {
  if (!mpn_param_int(MPN_PARAM_CHECK_BUFFERS)) return ncclSuccess;
  return mpn_cuda_buffer_check(op->comm, op_fn(op), name, op->buf, op->bytes, op->capturing ? MPN_BUFFER_CAPTURING : 0);
}

/* What a side's exported says (pair.h): ok where the buffer is usable,
 * else minus the refusal's code, for a rank's message to itself to report
 * as its own (report.c). */
static int32_t exported_as(ncclResult_t res, int32_t ok) { return res == ncclSuccess ? ok : -(int32_t)res; }

static uint64_t staged_in_way; /* (mpn_side_staged) */

/* Whether the peer still maps a freed allocation of this process that
 * overlaps the new one d describes: it could not map d's until it closed
 * that import, and its close waits for all of its device work, which may
 * wait for this host (docs/P2P.md, known problem 17). */
static int in_way(const mpn_op_t* op, const mpn_ipc_desc_t* d) {
  const mpn_rank_info_t* r = &op->comm->topo.ranks[op->peer];
  mpn_ipc_held_proc_t peer = {.pidns = r->pidns, .start_time = r->start_time, .pid = r->pid};
  int way = mpn_ipc_held_in_way(&peer, mpn_chan_proc_id(), d->base, d->size);
  if (way) {
    __atomic_add_fetch(&staged_in_way, 1, __ATOMIC_RELAXED);
    MPN_TRACE(MPN_SUBSYS_P2P, "rank %d still maps a freed allocation overlapping [%llx, +%llu): staged", op->peer,
              (unsigned long long)d->base, (unsigned long long)d->size);
  }
  return way;
}

ncclResult_t mpn_side_describe(plan_t* p, mpn_side_t* d) {
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
    if (mpn_event_mark(dev, op->stream, &ev)) {
      d->event = (uint64_t)(uintptr_t)ev;
      d->event_dev = dev;
    }
  }
  d->launch = p->launch;
  d->eager = p->eager_ok; /* the inbox needs neither an export nor a stage */
  d->eager_n = p->eager_n;
  const char* name = op->kind == MPN_OP_SEND ? "sendbuff" : "recvbuff";
  if (op->comm->transport[op->peer] != MPN_TRANSPORT_IPC || d->eager) {
    /* No export looks the buffer up here: the copy (into or out of the
     * inbox, or between buffers of this process) would run past it. */
    ncclResult_t res = range_check(op, name);
    d->exported = exported_as(res, 0);
    return res;
  }
  if (op->bytes == 0) { /* nothing to map: its flags alone (the pointer may be anything, NULL too) */
    d->exported = 0;
    return ncclSuccess;
  }
  int pool = 0;
  ncclResult_t res = mpn_ipc_export(op->buf, name, &d->ipc, &pool);
  /* A staged allocation's export judged no extent (a pool's range may be
   * the pool's, a virtual-memory buffer may span mappings). */
  if (res == ncclSuccess) res = pool ? range_check(op, name) : extent_check(op, name, &d->ipc);
  if (res == ncclSuccess && !pool && in_way(op, &d->ipc)) {
    d->in_way_base = d->ipc.base;
    d->in_way_size = d->ipc.size;
    pool = 1; /* staged like a memory-pool buffer, until the peer has closed those imports */
  }
  if (res == ncclSuccess && pool) {
    res = mpn_stage_get(op->comm, op_fn(op), name, op->bytes, &p->stage);
    if (res == ncclSuccess)
      res = mpn_ipc_export_own(op->comm, op_fn(op), mpn_stage_ptr(p->stage), "the staging buffer", &d->ipc);
  }
  d->exported = exported_as(res, 1);
  return res;
}

ncclResult_t mpn_side_resolve(plan_t* p, const mpn_side_t* other, void** ptr) {
  if (other->proc == mpn_chan_proc_id()) {
    *ptr = (void*)(uintptr_t)other->ptr;
    return ncclSuccess;
  }
  MPN_CHECK(mpn_ipc_import(other->proc, &other->ipc, ptr, &p->ref));
  p->imported = 1;
  return ncclSuccess;
}

void mpn_side_heed(const mpn_side_t* other) {
  if (other->in_way_size && other->proc != mpn_chan_proc_id())
    mpn_ipc_drop_in_way(other->proc, other->in_way_base, other->in_way_size);
}

uint64_t mpn_side_staged(void) { return __atomic_load_n(&staged_in_way, __ATOMIC_RELAXED); }
