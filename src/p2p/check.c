/*
 * check.c - the refusals of a group's sends and receives that come before
 * anything of it is posted (p2p.c), so that a refused group leaves its
 * communicators usable: a rank without a device, a UCX peer's buffer, a
 * captured receive from a peer that ended its communicator, and more
 * messages per peer and direction than a launch can hold.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/buffer.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/staged.h"
#endif

/* Refusals that must come before a message is posted. */
static ncclResult_t op_precheck(const mpn_op_t* op) {
  struct ncclComm* comm = op->comm;
  const char* fn = op->kind == MPN_OP_SEND ? "ncclSend" : "ncclRecv";
  if (comm->cuda_dev < 0)
    return mpn_error_set(comm, ncclInvalidUsage, "%s: comm %p has no CUDA device", fn, (void*)comm);
  /* A receive from a peer that ended normally passed its call for a message
   * the peer left (left.c), which only the first replay could take. */
  if (op->kind == MPN_OP_RECV && op->capturing && mpn_comm_peer_ended(comm, op->peer))
    return mpn_error_set(comm, ncclRemoteError,
                         "%s: peer %d ended its communicator (ncclCommDestroy) and its process exited; a receive "
                         "captured in a CUDA graph would wait at every replay for a message it sends no more; nothing "
                         "of the group was enqueued",
                         fn, op->peer);
  if (comm->transport[op->peer] == MPN_TRANSPORT_UCX) {
#ifdef HAVE_UCX
    /* Refused before anything of the group is enqueued (the peer's side is
     * not told: its matching call waits, as for any refused argument). */
    if (mpn_param_int(MPN_PARAM_CHECK_BUFFERS))
      MPN_CHECK(mpn_cuda_buffer_check(comm, fn, op->kind == MPN_OP_SEND ? "sendbuff" : "recvbuff", op->buf, op->bytes,
                                      MPN_BUFFER_HOST_OK | (op->capturing ? MPN_BUFFER_CAPTURING : 0)));
    return mpn_ucx_staged_check(op);
#else
    return mpn_error_set(comm, ncclInvalidUsage,
                         "%s with peer %d: the UCX transport (other hosts, or forced by "
                         "MPINCCL_TRANSPORT=ucx / NCCL_P2P_DISABLE=1) is not in this build "
                         "of mpinccl",
                         fn, op->peer);
#endif
  }
  return ncclSuccess;
}

/*
 * A launch holds at most MPN_PAIR_SLOTS messages per peer and direction
 * (MPN_PAIR_GRAPH_SLOTS of those captured in a graph, whose ring is that
 * long).  Message k and k + the ring's length share a slot and its flag
 * words, and in one launch every "ready" write is issued before any wait:
 * if the two had different first sides, one side's "ready" for the later
 * message could satisfy its own wait for the earlier one, or the other
 * side's older write land last (a hang or a copy too early); a captured
 * one finds its slot held by its own capture and is refused after the
 * launch posted the others, failing both communicators.  Messages of later
 * launches on the same stream are ordered behind the earlier ones' waits.
 * Refused before anything is posted, so the communicator stays usable.
 * Counted after sorting (a group may hold thousands of messages: an
 * all-to-all over many ranks).
 */
typedef struct {
  const mpn_op_t* op;
} size_key_t;

static int size_key_cmp(const void* a, const void* b) {
  const mpn_op_t *x = ((const size_key_t*)a)->op, *y = ((const size_key_t*)b)->op;
  uintptr_t cx = (uintptr_t)x->comm, cy = (uintptr_t)y->comm;
  if (cx != cy) return cx < cy ? -1 : 1;
  if (x->peer != y->peer) return x->peer < y->peer ? -1 : 1;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  return (x->capturing != 0) - (y->capturing != 0);
}

static ncclResult_t group_size_check(mpn_op_t* ops) {
  int n = 0;
  for (mpn_op_t* op = ops; op; op = op->next) n++;
  if (n <= MPN_PAIR_GRAPH_SLOTS) return ncclSuccess;
  size_key_t* keys = malloc((size_t)n * sizeof(*keys));
  if (keys == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  int k = 0;
  for (mpn_op_t* op = ops; op; op = op->next)
    if (op->comm->transport[op->peer] != MPN_TRANSPORT_UCX) keys[k++].op = op;
  qsort(keys, (size_t)k, sizeof(*keys), size_key_cmp);
  ncclResult_t res = ncclSuccess;
  for (int i = 0, run = 0; i < k && res == ncclSuccess; i++) {
    run = i > 0 && size_key_cmp(&keys[i - 1], &keys[i]) == 0 ? run + 1 : 1;
    const mpn_op_t* op = keys[i].op;
    int limit = op->capturing ? MPN_PAIR_GRAPH_SLOTS : MPN_PAIR_SLOTS;
    if (run <= limit || (i + 1 < k && size_key_cmp(&keys[i], &keys[i + 1]) == 0)) continue;
    res = mpn_error_set(
        op->comm, ncclInvalidUsage, "ncclGroupEnd: %d %s%s rank %d in one group; at most %d per peer and direction%s",
        run, op->capturing ? "captured " : "", op->kind == MPN_OP_SEND ? "ncclSend calls to" : "ncclRecv calls from",
        op->peer, limit, op->capturing ? " in a CUDA graph capture" : "");
  }
  free(keys);
  return res;
}

ncclResult_t mpn_p2p_check(mpn_op_t* ops) {
  MPN_CHECK(group_size_check(ops));
  for (mpn_op_t* op = ops; op; op = op->next) MPN_CHECK(op_precheck(op));
  return ncclSuccess;
}
