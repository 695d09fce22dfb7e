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
 * no copy or compute engine at all.
 */
#include "p2p/p2p.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "cuda/driver.h"
#include "p2p/pair.h"
#include "transport.h"

typedef struct {
  mpn_pair_t *send, *recv; /* me -> peer, peer -> me */
  uint64_t send_seq, recv_seq;
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
  mpn_post_role_t role;
  void *src, *dst; /* second side: where the data moves */
  int move;        /* second side and both descriptors valid */
} plan_t;

static ncclResult_t peer_state(struct ncclComm* comm, int peer, peer_state_t** out) {
  if (comm->p2p == NULL) {
    comm->p2p = calloc(1, sizeof(*comm->p2p));
    if (comm->p2p == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  }
  if (comm->p2p->peers == NULL) MPN_CALLOC(comm->p2p->peers, comm->nranks);
  peer_state_t* ps = &comm->p2p->peers[peer];
  if (ps->send == NULL) MPN_CHECK(mpn_pair_map(comm->bootstrap->key, comm->rank, peer, &ps->send));
  if (ps->recv == NULL) MPN_CHECK(mpn_pair_map(comm->bootstrap->key, peer, comm->rank, &ps->recv));
  *out = ps;
  return ncclSuccess;
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
  mpn_pair_mem_t* mem = p->pair->mem;
  memcpy(mem->error, text, sizeof(text));
  __atomic_fetch_add(&mem->errors, 1, __ATOMIC_RELEASE);
  mpn_error_set(op->comm, ncclInvalidUsage, "%s", text);
  mpn_comm_set_async(op->comm, ncclInvalidUsage);
}

/* This side's descriptor; on failure a descriptor that tells the peer to skip. */
static ncclResult_t describe(const mpn_op_t* op, mpn_side_t* d) {
  memset(d, 0, sizeof(*d));
  d->proc = mpn_chan_proc_id();
  d->ptr = (uint64_t)(uintptr_t)op->buf;
  d->bytes = op->bytes;
  d->count = op->count;
  d->dtype = op->dtype;
  if (op->comm->transport[op->peer] != MPN_TRANSPORT_IPC) return ncclSuccess;
  ncclResult_t res = mpn_ipc_export(op->buf, op->kind == MPN_OP_SEND ? "sendbuff" : "recvbuff", &d->ipc);
  d->exported = res == ncclSuccess ? 1 : -1;
  return res;
}

/* Where the peer's buffer is, in this process. */
static ncclResult_t resolve(const mpn_side_t* other, void** ptr) {
  if (other->proc == mpn_chan_proc_id()) {
    *ptr = (void*)(uintptr_t)other->ptr;
    return ncclSuccess;
  }
  return mpn_ipc_import(other->proc, &other->ipc, ptr);
}

/* Posts one message; any failure still leaves a posted slot so nobody hangs. */
static ncclResult_t plan_post(plan_t* p) {
  mpn_op_t* op = p->op;
  struct ncclComm* comm = op->comm;
  peer_state_t* ps = NULL;
  MPN_CHECK(peer_state(comm, op->peer, &ps));
  int send = op->kind == MPN_OP_SEND;
  p->pair = send ? ps->send : ps->recv;
  p->seq = send ? ++ps->send_seq : ++ps->recv_seq;
  mpn_side_t mine;
  ncclResult_t bad = describe(op, &mine);
  int side = send ? MPN_SIDE_SEND : MPN_SIDE_RECV;
  MPN_CHECK(mpn_pair_post(p->pair, p->seq, side, &mine, &p->role));
  if (p->role != MPN_POST_SECOND) return bad;
  mpn_side_t other = p->pair->mem->slots[p->seq % MPN_PAIR_SLOTS].side[side ^ 1];
  mpn_pair_consume(p->pair, p->seq);
  if (bad != ncclSuccess || other.exported < 0) return bad;
  if (other.count != mine.count || other.dtype != mine.dtype) {
    report_mismatch(p, &mine, &other);
    return ncclSuccess;
  }
  void* far;
  MPN_CHECK(resolve(&other, &far));
  p->src = send ? op->buf : far;
  p->dst = send ? far : op->buf;
  p->move = mine.bytes > 0;
  return ncclSuccess;
}

/* Issues one phase of the plans on their streams. */
static ncclResult_t issue_phase(const mpn_driver_t* drv, plan_t* plans, int n, int phase) {
  for (int i = 0; i < n; i++) {
    plan_t* p = &plans[i];
    CUstream s = (CUstream)p->op->stream;
    int first = p->role == MPN_POST_FIRST;
    if (phase == 1 && first) {
      MPN_CU_CHECK(drv, stream_write_value64(s, mpn_pair_flag(p->pair, p->seq, 0), p->seq, 0));
    } else if (phase == 2 && !first) {
      MPN_CU_CHECK(drv, stream_wait_value64(s, mpn_pair_flag(p->pair, p->seq, 0), p->seq,
                                            CU_STREAM_WAIT_VALUE_GEQ));
      if (p->move) MPN_CUDA_CHECK(cudaMemcpyAsync(p->dst, p->src, p->op->bytes, cudaMemcpyDefault, p->op->stream));
      MPN_CU_CHECK(drv, stream_write_value64(s, mpn_pair_flag(p->pair, p->seq, 1), p->seq, 0));
    } else if (phase == 3 && first) {
      MPN_CU_CHECK(drv, stream_wait_value64(s, mpn_pair_flag(p->pair, p->seq, 1), p->seq,
                                            CU_STREAM_WAIT_VALUE_GEQ));
    }
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
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(op->stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone)
    return mpn_error_set(comm, ncclInvalidUsage,
                         "%s: capturing send/receive in a CUDA graph is not supported yet", fn);
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
    ncclResult_t res = plan_post(&plans[i]);
    if (res != ncclSuccess && first_error == ncclSuccess) first_error = res;
  }
  ncclResult_t res = ncclSuccess;
  for (int phase = 1; phase <= 3 && res == ncclSuccess; phase++) res = issue_phase(drv, plans, n, phase);
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
      mpn_error_set(comm, ncclInvalidUsage, "%s", pairs[k]->mem->error);
      mpn_comm_set_async(comm, ncclInvalidUsage);
    }
  }
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
