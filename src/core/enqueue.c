/*
 * enqueue.c - the data calls' front end: every argument is checked here, in
 * the order NCCL checks them, before an operation joins the caller's group.
 * An error inside a group is returned by the call and again by ncclGroupEnd.
 */
#include "core/enqueue.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/group.h"
#include "cuda/device.h"
#include "p2p/p2p.h"
#include "rma/rma.h"

static const struct {
  const char* name;
  size_t size;
} dtypes[ncclNumTypes] = {
    {"ncclInt8", 1},    {"ncclUint8", 1},   {"ncclInt32", 4},     {"ncclUint32", 4},
    {"ncclInt64", 8},   {"ncclUint64", 8},  {"ncclFloat16", 2},   {"ncclFloat32", 4},
    {"ncclFloat64", 8}, {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
};

unsigned long long mpn_op_stream_id(const mpn_op_t* op) {
  return op->stream_id ? op->stream_id : mpn_cuda_stream_id(op->stream);
}

size_t mpn_dtype_size(ncclDataType_t dtype) { return dtypes[dtype].size; }
const char* mpn_dtype_name(ncclDataType_t dtype) { return dtypes[dtype].name; }

ncclResult_t mpn_check_count(struct ncclComm* comm, const char* caller, size_t count,
                             ncclDataType_t dtype, size_t* bytes) {
  if ((int)dtype < 0 || (int)dtype >= ncclNumTypes)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: datatype %d is not a valid ncclDataType_t [0, %d)", caller, (int)dtype,
                      ncclNumTypes);
  size_t size = dtypes[dtype].size;
  if (count > SIZE_MAX / size)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: count %zu of %s overflows size_t", caller,
                      count, dtypes[dtype].name);
  *bytes = count * size;
  return ncclSuccess;
}

ncclResult_t mpn_check_peer(struct ncclComm* comm, const char* caller, int peer, int allow_null) {
  if (allow_null && peer == MPINCCL_PROC_NULL) return ncclSuccess;
  if (peer < 0 || peer >= comm->nranks)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: peer %d out of range [0, %d)%s", caller, peer,
                      comm->nranks, allow_null ? " (or MPINCCL_PROC_NULL)" : "");
  return ncclSuccess;
}

/* Whether a peer (in range) is gone with nothing of this rank's waiting for
 * it, the communicator going on (the watchdog found it: MPN_PEER_LEFT or
 * MPN_PEER_EXITED): it can answer nothing more (a receive or a wait may
 * still take what one that ended normally sent before: p2p_enqueue,
 * wait_left). */
static int peer_left(const struct ncclComm* comm, int peer) {
  return __atomic_load_n(&comm->peer_gone[peer], __ATOMIC_ACQUIRE) >= MPN_PEER_LEFT;
}

static ncclResult_t peer_here(struct ncclComm* comm, const char* caller, int peer) {
  int gone = __atomic_load_n(&comm->peer_gone[peer], __ATOMIC_ACQUIRE);
  if (gone < MPN_PEER_LEFT) return ncclSuccess; /* (as peer_left, read once) */
  if (gone == MPN_PEER_EXITED)
    return MPN_REFUSE(comm, ncclRemoteError,
                      "%s: peer %d's process exited (its communicator ended or it failed) before it exchanged "
                      "anything with this rank",
                      caller, peer);
  return MPN_REFUSE(comm, ncclRemoteError,
                    "%s: peer %d ended its communicator (ncclCommDestroy) and its process exited", caller, peer);
}

/* Checks and queues a send or receive. */
static ncclResult_t p2p_enqueue(mpn_op_kind_t kind, const char* caller, const char* bufname,
                                void* buf, size_t count, ncclDataType_t dtype, int peer,
                                ncclComm_t comm, cudaStream_t stream) {
  mpn_op_t op = {.kind = kind, .comm = comm, .buf = buf, .count = count, .dtype = dtype,
                 .peer = peer, .stream = stream};
  MPN_CHECK(mpn_comm_check(comm, caller, MPN_COMM_NEED_HEALTHY));
  MPN_CHECK(mpn_check_count(comm, caller, count, dtype, &op.bytes));
  MPN_CHECK(mpn_check_peer(comm, caller, peer, 1));
  /* As MPI_PROC_NULL: a missing neighbour needs no buffer. */
  if (peer == MPINCCL_PROC_NULL) return ncclSuccess;
  /* A message a peer that ended normally posted before may still be there
   * for a receive to take (p2p/left.c); the open group's receives from it
   * come first. */
  if (kind == MPN_OP_RECV && mpn_comm_peer_ended(comm, peer))
    MPN_CHECK(mpn_p2p_left_recv(comm, caller, peer, mpn_group_queued(comm, MPN_OP_RECV, peer, 0)));
  else
    MPN_CHECK(peer_here(comm, caller, peer));
  if (buf == NULL && count > 0)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: %s is NULL with count %zu", caller, bufname,
                      count);
  /* A message of no bytes is still a message, as in NCCL since 2.12.10: it
   * takes its number and the receiver's stream waits for the sender's. */
  return mpn_group_add_op(&op);
}

MPN_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype,
        int peer, ncclComm_t comm, cudaStream_t stream) {
  return mpn_group_fail(p2p_enqueue(MPN_OP_SEND, "ncclSend", "sendbuff", (void*)sendbuff, count,
                                    datatype, peer, comm, stream));
}

MPN_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
        ncclComm_t comm, cudaStream_t stream) {
  return mpn_group_fail(
      p2p_enqueue(MPN_OP_RECV, "ncclRecv", "recvbuff", recvbuff, count, datatype, peer, comm,
                  stream));
}

/* Checks shared by the one-sided calls. */
/* Whether a one-sided call's peer, sigIdx, ctx and flags are good for comm
 * (a live one): what rma_check refuses, without formatting a message. */
static int rma_args_ok(ncclComm_t comm, int peer, int sigIdx, int ctx, unsigned int flags) {
  return peer >= 0 && peer < comm->nranks && sigIdx == 0 && ctx >= 0 && ctx < comm->config.num_rma_ctx &&
         flags == 0;
}

static ncclResult_t rma_check(ncclComm_t comm, const char* caller, int peer, int sigIdx, int ctx,
                              unsigned int flags) {
  MPN_CHECK(mpn_comm_check(comm, caller, MPN_COMM_NEED_HEALTHY));
  if (rma_args_ok(comm, peer, sigIdx, ctx, flags)) return peer_here(comm, caller, peer);
  MPN_CHECK(mpn_check_peer(comm, caller, peer, 0));
  if (sigIdx != 0)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: sigIdx %d is not 0", caller, sigIdx);
  if (ctx < 0 || ctx >= comm->config.num_rma_ctx)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: ctx %d out of range [0, %d) (numRmaCtx%s)", caller, ctx,
                      comm->config.num_rma_ctx,
                      comm->config.num_rma_ctx == 0 ? " 0: the communicator has no one-sided operations" : "");
  if (flags != 0)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: flags 0x%x is not 0", caller, flags);
  return peer_here(comm, caller, peer);
}

static ncclResult_t put_signal(const void* localbuff, size_t count, ncclDataType_t datatype,
                               int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                               int ctx, unsigned int flags, ncclComm_t comm,
                               cudaStream_t stream) {
  const char* fn = "ncclPutSignal";
  mpn_op_t op = {.kind = MPN_OP_PUT_SIGNAL, .comm = comm, .buf = (void*)localbuff,
                 .count = count, .dtype = datatype, .peer = peer, .stream = stream,
                 .win = peerWin, .offset = peerWinOffset, .ctx = ctx};
  MPN_CHECK(rma_check(comm, fn, peer, sigIdx, ctx, flags));
  MPN_CHECK(mpn_check_count(comm, fn, count, datatype, &op.bytes));
  if (peerWin == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: peerWin is NULL", fn);
  if (localbuff == NULL && count > 0)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: localbuff is NULL with count %zu", fn, count);
  if (peerWinOffset > SIZE_MAX - op.bytes)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: peerWinOffset %zu + %zu bytes overflows size_t", fn, peerWinOffset,
                      op.bytes);
  return mpn_group_add_op(&op);
}

MPN_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype,
        int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
        unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  return mpn_group_fail(put_signal(localbuff, count, datatype, peer, peerWin, peerWinOffset,
                                   sigIdx, ctx, flags, comm, stream));
}

static ncclResult_t signal_only(int peer, int sigIdx, int ctx, unsigned int flags,
                                ncclComm_t comm, cudaStream_t stream) {
  mpn_op_t op = {.kind = MPN_OP_SIGNAL, .comm = comm, .peer = peer, .stream = stream, .ctx = ctx};
  MPN_CHECK(rma_check(comm, "ncclSignal", peer, sigIdx, ctx, flags));
  return mpn_group_add_op(&op);
}

MPN_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
        ncclComm_t comm, cudaStream_t stream) {
  return mpn_group_fail(signal_only(peer, sigIdx, ctx, flags, comm, stream));
}

/* A wait naming a peer that ended its communicator normally and exited
 * (MPN_PEER_LEFT) passes, as in NCCL, when the signals it sent before its
 * end cover the count this rank expects once the wait is done: what waits
 * launched so far counted, what the open group's count, and this call's
 * descriptors up to descs[i] (rma/left.c); else it could never end. */
static ncclResult_t wait_left(ncclComm_t comm, const char* what, const ncclWaitSignalDesc_t* descs, int i) {
  const ncclWaitSignalDesc_t* d = &descs[i];
  /* (descriptors before descs[i] passed their checks: positive counts) */
  uint64_t need = mpn_rma_expected(comm, d->peer, d->ctx) +
                  mpn_group_queued(comm, MPN_OP_WAIT_SIGNAL, d->peer, d->ctx) +
                  mpn_descs_wanted(descs, i + 1, d->peer, d->ctx);
  uint64_t sent = 0;
  if (mpn_rma_left_covers(comm, d->peer, d->ctx, need, &sent)) return ncclSuccess;
  return MPN_REFUSE(comm, ncclRemoteError,
                    "%s: rank %d ended its communicator after sending %llu signals on ctx %d; this wait needs %llu",
                    what, d->peer, (unsigned long long)sent, d->ctx, (unsigned long long)need);
}

static ncclResult_t wait_signal(int nDesc, ncclWaitSignalDesc_t* descs, ncclComm_t comm,
                                cudaStream_t stream) {
  const char* fn = "ncclWaitSignal";
  MPN_CHECK(mpn_comm_check(comm, fn, MPN_COMM_NEED_HEALTHY));
  if (nDesc <= 0) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: nDesc %d is not positive", fn, nDesc);
  if (descs == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: signalDescs is NULL", fn);
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t* d = &descs[i];
    int ok = d->opCnt > 0 && rma_args_ok(comm, d->peer, d->sigIdx, d->ctx, 0);
    if (ok && !peer_left(comm, d->peer))
      continue; /* the message is formatted for a refused one only: a barrier passes one per rank */
    char what[48];
    snprintf(what, sizeof(what), "%s: signalDescs[%d]", fn, i);
    if (ok && mpn_comm_peer_ended(comm, d->peer)) {
      MPN_CHECK(wait_left(comm, what, descs, i));
      continue;
    }
    if (descs[i].opCnt <= 0)
      return MPN_REFUSE(comm, ncclInvalidArgument, "%s.opCnt %d is not positive", what,
                        descs[i].opCnt);
    MPN_CHECK(rma_check(comm, what, descs[i].peer, descs[i].sigIdx, descs[i].ctx, 0));
  }
  mpn_op_t op = {.kind = MPN_OP_WAIT_SIGNAL, .comm = comm, .stream = stream, .ndesc = nDesc};
  op.descs = malloc((size_t)nDesc * sizeof(*descs));
  if (op.descs == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  memcpy(op.descs, descs, (size_t)nDesc * sizeof(*descs));
  ncclResult_t res = mpn_group_add_op(&op);
  return res;
}

MPN_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs,
        ncclComm_t comm, cudaStream_t stream) {
  return mpn_group_fail(wait_signal(nDesc, signalDescs, comm, stream));
}
