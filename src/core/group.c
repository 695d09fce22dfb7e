/*
 * group.c - group nesting and what ncclGroupEnd does: creation jobs first
 * (they may run on threads so that one thread can create several ranks),
 * then each communicator's operations, in program order, handed to the
 * point-to-point and one-sided engines.
 */
#include "core/group.h"

#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alias.h"
#include "core/api.h"
#include "core/drain.h"
#include "core/error.h"
#include "cuda/device.h"
#include "cuda/ipc_closer.h"
#include "p2p/p2p.h"
#include "rma/rma.h"
#include "rma/winasync.h"
#include "rma/wingroup.h"

static __thread struct {
  int depth;
  ncclResult_t error;
  mpn_op_t *ops, *ops_tail;
  mpn_init_job_t *jobs, *jobs_tail;
  mpn_win_job_t *wins, *wins_tail;
} group;
/* group.error's text, which ncclGroupEnd sets again with it (apart: the
 * struct above is cleared at every ncclGroupEnd, this only read then). */
static __thread char group_error_text[512];

int mpn_group_depth(void) { return group.depth; }

ncclResult_t mpn_group_fail(ncclResult_t res) {
  if (group.depth > 0 && group.error == ncclSuccess && res != ncclSuccess) {
    group.error = res;
    snprintf(group_error_text, sizeof(group_error_text), "%s", mpn_error_last(NULL));
  }
  return res;
}

/* The calling thread's operations come from a store of its own, without a
 * heap allocation and free per operation in every group; a group with
 * more than the store holds takes the rest from the heap.  Only this
 * thread adds and frees them (its group is its own), and an op stays
 * taken until ops_free, nested use or not.  Kept in thread storage, not
 * on the heap: nothing to free, or leak, when the thread ends. */
#define OP_STORE MPN_GROUP_OPS_KEPT
static __thread mpn_op_t op_store[OP_STORE];
static __thread uint32_t op_store_taken; /* bit i: op_store[i] is in use */

_Static_assert(OP_STORE <= 32, "op_store_taken has a bit per op");

static mpn_op_t* op_new(void) {
  if (op_store_taken != (uint32_t)((1ull << OP_STORE) - 1)) {
    int i = __builtin_ctz(~op_store_taken);
    op_store_taken |= 1u << i;
    return &op_store[i];
  }
  return malloc(sizeof(mpn_op_t));
}

static void op_delete(mpn_op_t* op) {
  uintptr_t i = ((uintptr_t)op - (uintptr_t)op_store) / sizeof(*op); /* (a heap op's is out of range) */
  if (i < OP_STORE && op == &op_store[i])
    op_store_taken &= ~(1u << i);
  else
    free(op);
}

static void ops_free(mpn_op_t* ops) {
  while (ops) {
    mpn_op_t* next = ops->next;
    free(ops->descs);
    op_delete(ops);
    ops = next;
  }
}

/* The jobs of a group that failed.  A rank's creation from a unique id
 * tells the rendezvous why (the thread's text: the group's error), so
 * that the other ranks fail at once rather than at their deadline, as
 * when its own arguments are refused (init.c).  A split and a creation
 * from an MPI communicator never joined their collective, which the same
 * call made again later still meets. */
static void jobs_discard(mpn_init_job_t* jobs, ncclResult_t error) {
  while (jobs) {
    mpn_init_job_t* next = jobs->next;
    if (jobs->kind == MPN_INIT_RANK) mpn_bootstrap_rendezvous_fail(&jobs->id, jobs->nranks, jobs->rank, error);
    mpn_init_job_release(jobs);
    mpn_init_job_let_go(jobs, 1);
    free(jobs);
    jobs = next;
  }
}

/* A stream whose capture was invalidated (by a call the capture does not
 * allow) takes nothing: its work would fail, while the operation would
 * still use up a message or signal number that its peer counts too.  Sets
 * each op's capturing, asking once per stream (of the first few) on its
 * communicator's device: a per-thread stream handle names one stream per
 * device.  The launches read op->capturing and never ask again; they read
 * op->stream_id too, asked here once per stream that is not capturing (the
 * send/receive launch and the drain each asked before).  dev: the calling
 * thread's current device (ops_launch), current again on return. */
static ncclResult_t capture_check(mpn_op_t* lists[2], int dev) {
  struct stream_capture {
    cudaStream_t s;
    int dev;
    enum cudaStreamCaptureStatus cap;
    unsigned long long id, sid;
  } seen[8];
  int n = 0, current = dev;
  ncclResult_t res = ncclSuccess;
  for (int k = 0; k < 2 && res == ncclSuccess; k++)
    for (mpn_op_t* op = lists[k]; op && res == ncclSuccess; op = op->next) {
      int i = 0, on = op->comm->cuda_dev;
      while (i < n && (seen[i].s != op->stream || seen[i].dev != on)) i++;
      enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
      unsigned long long id = 0, sid = 0;
      if (i < n) {
        cap = seen[i].cap;
        id = seen[i].id;
        sid = seen[i].sid;
      } else {
        mpn_cuda_switch_device(&current, on);
        if (cudaStreamGetCaptureInfo(op->stream, &cap, &id, NULL, NULL, NULL, NULL) != cudaSuccess) {
          cudaGetLastError(); /* (an invalidated capture may answer so: ask the plain way) */
          cap = cudaStreamCaptureStatusNone;
          if (cudaStreamIsCapturing(op->stream, &cap) != cudaSuccess) cudaGetLastError();
        }
        int room = n < (int)(sizeof(seen) / sizeof(seen[0])); /* (else the launches ask) */
        if (room && cap == cudaStreamCaptureStatusNone) sid = mpn_cuda_stream_id(op->stream);
        if (room) seen[n++] = (struct stream_capture){op->stream, on, cap, id, sid};
      }
      op->capturing = cap == cudaStreamCaptureStatusActive;
      op->capture_id = op->capturing ? id : 0;
      op->stream_id = sid;
      if (cap == cudaStreamCaptureStatusInvalidated)
        res = MPN_REFUSE(op->comm, ncclInvalidUsage,
                         "ncclGroupEnd: stream %p of an operation with rank %d is in a CUDA graph capture "
                         "that was invalidated; nothing of the group was enqueued",
                         (void*)op->stream, op->peer);
    }
  if (dev >= 0) mpn_cuda_switch_device(&current, dev);
  return res;
}

/* Before the launch: each stream a communicator's operations go to, once,
 * for its finalize's mark (drain.h); a capturing stream's work is the
 * graph's (capture_check told which).  dev as capture_check's.  Fails
 * (out of memory) before anything is posted. */
static ncclResult_t work_begin(mpn_op_t* lists[2], int dev) {
  ncclResult_t res = ncclSuccess;
  int current = dev; /* stream ids on each comm's device */
  struct {
    struct ncclComm* comm;
    cudaStream_t s;
  } seen[16]; /* beyond that many pairs one may be begun twice: it then takes an event */
  int n = 0;
  for (int k = 0; k < 2 && res == ncclSuccess; k++)
    for (mpn_op_t* op = lists[k]; op && res == ncclSuccess; op = op->next) {
      if (op->capturing) continue;
      int i = 0;
      while (i < n && (seen[i].comm != op->comm || seen[i].s != op->stream)) i++;
      if (i < n) continue;
      if (n < (int)(sizeof(seen) / sizeof(seen[0]))) {
        seen[n].comm = op->comm;
        seen[n++].s = op->stream;
      }
      int rma_too = k == 1;
      for (mpn_op_t* r = lists[1]; r && !rma_too; r = r->next) rma_too = r->stream == op->stream;
      mpn_cuda_switch_device(&current, op->comm->cuda_dev);
      res = mpn_drain_begin(op->comm, op->stream, mpn_op_stream_id(op), rma_too);
    }
  if (dev >= 0) mpn_cuda_switch_device(&current, dev);
  return res;
}

/* Whether a held comm still takes work: finalized (by another thread, or
 * by a destroy under way) or aborted since the call, it does not (finalize
 * returned once the streams had run everything enqueued until then). */
static int comm_open(struct ncclComm* comm) {
  return __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE) == MPN_COMM_READY && !comm->abort_flag;
}

/* Holds the comm of every op (an abort or destroy from another thread frees
 * it only once the launch is over, mpn_comm_free) or, if one was freed,
 * finalized or aborted since its call, none: refused as mpn_comm_check
 * refuses such a comm.  By serial, not address: a communicator made since
 * at a freed one's address is another one.  One hold of the registry's
 * lock for all of them, rather than one per op: the ops are judged in the
 * same order, each as it would have been alone. */
static ncclResult_t ops_hold(mpn_op_t* lists[2]) {
  mpn_comm_registry_lock();
  for (int k = 0; k < 2; k++)
    for (mpn_op_t* op = lists[k]; op; op = op->next) {
      int held = mpn_comm_hold_serial_locked(op->comm, op->comm_serial);
      if (held && comm_open(op->comm)) continue;
      if (held) mpn_comm_release(op->comm);
      for (int j = 0; j <= k; j++)
        for (mpn_op_t* q = lists[j]; q && q != op; q = q->next) mpn_comm_release(q->comm);
      mpn_comm_registry_unlock();
      return MPN_REFUSE(NULL, held ? ncclInvalidUsage : ncclInvalidArgument,
                        "ncclGroupEnd: comm %p %s after its operations were enqueued; nothing of the group was done",
                        (void*)op->comm, held ? "was finalized or aborted" : "was destroyed or aborted");
    }
  mpn_comm_registry_unlock();
  return ncclSuccess;
}

/* Sends and receives go to the p2p engine together (a group may span
 * communicators), then one-sided operations to the RMA engine: on every
 * stream, a group's sends and receives come before its signals, and its
 * waits for signals come last, so no wait blocks anything of the group. */
static ncclResult_t ops_launch(mpn_op_t* ops) {
  mpn_op_t *p2p = NULL, **p2p_tail = &p2p, *rma = NULL, **rma_tail = &rma;
  for (mpn_op_t *op = ops, *next; op; op = next) {
    next = op->next;
    op->next = NULL;
    mpn_op_t*** tail = op->kind == MPN_OP_SEND || op->kind == MPN_OP_RECV ? &p2p_tail : &rma_tail;
    **tail = op;
    *tail = &op->next;
  }
  mpn_op_t* lists[2] = {p2p, rma};
  ncclResult_t res = ops_hold(lists);
  if (res != ncclSuccess) {
    ops_free(p2p);
    ops_free(rma);
    return res;
  }
  /* Streams forked before the engines' checks: a refusal there may tell
   * peers, a failed fork tells nobody, as nothing is posted yet.  No import
   * is closed meanwhile, unless one ran for long (cuda/ipc_closer.h). */
  int gated = mpn_ipc_closer_launch_begin();
  mpn_alias_t alias = {0, NULL};
  /* The calling thread's current device, asked once per launch (each step
   * asked: the checks of captures, the drain's begin and end, each engine)
   * and given to each step, which switches only to its ops' devices and
   * leaves this one current again; the checks too (a UCX lane's making
   * included, ucx/staged.c).  Asked again after them where CUDA could not
   * tell (-1). */
  int dev = mpn_cuda_device_enter(-1);
  res = capture_check(lists, dev);
  if (res == ncclSuccess) res = mpn_alias_fork(lists, &alias);
  if (res == ncclSuccess && p2p) res = mpn_p2p_check(p2p);
  if (res == ncclSuccess && rma) res = mpn_rma_check(rma);
  if (res != ncclSuccess) mpn_alias_join(&alias); /* (nothing was issued on the aliases) */
  if (res == ncclSuccess) {
    if (dev < 0) dev = mpn_cuda_device_enter(-1);
    /* Both always run once checked and listed for the drain: send/receive
     * may report an error after posting everything, and a signal left out
     * would leave its peer behind. */
    res = work_begin(lists, dev);
    if (res == ncclSuccess) {
      ncclResult_t sent = p2p ? mpn_p2p_launch(p2p, dev) : ncclSuccess;
      ncclResult_t put = rma ? mpn_rma_launch(rma, dev) : ncclSuccess;
      res = sent != ncclSuccess ? sent : put;
    }
    mpn_drain_end(dev); /* (after a failed begin: marks of streams where nothing new was enqueued) */
    mpn_keep(&res, mpn_alias_join(&alias));
  }
  mpn_ipc_closer_launch_end(gated);
  for (int k = 0; k < 2; k++)
    for (mpn_op_t* op = lists[k]; op; op = op->next) mpn_comm_release(op->comm);
  ops_free(p2p);
  ops_free(rma);
  return res;
}

/* Ends the outermost group: everything collected is run or discarded.
 * Creations first, then window registrations (which need the
 * communicators; an operation of the group cannot name a window the group
 * makes, whose handle it does not have yet), then the operations. */
static ncclResult_t group_flush(void) {
  mpn_op_t* ops = group.ops;
  mpn_init_job_t* jobs = group.jobs;
  mpn_win_job_t* wins = group.wins;
  ncclResult_t error = group.error;
  /* The text of the error returned, not of a later call's refusal. */
  if (error != ncclSuccess) mpn_error_set(NULL, error, "%s", group_error_text);
  memset(&group, 0, sizeof(group));
  if (error == ncclSuccess && jobs && mpn_init_jobs_mixed(jobs))
    error = MPN_REFUSE(NULL, ncclInvalidArgument,
                       "ncclGroupEnd: blocking and non-blocking communicators are created in one group; "
                       "nothing of the group was done");
  if (error != ncclSuccess) {
    ops_free(ops);
    jobs_discard(jobs, error);
    mpn_win_jobs_refuse(wins, error); /* the peers' calls fail with them, not pair with later ones */
    return error;
  }
  ncclResult_t res = jobs ? mpn_init_jobs_launch(jobs) : ncclSuccess;
  if (res != ncclSuccess && res != ncclInProgress) {
    ops_free(ops);
    mpn_win_jobs_refuse(wins, res);
    return res;
  }
  ncclResult_t win_res = ncclSuccess, ops_res = ncclSuccess;
  if (wins && mpn_win_async_group_wanted(wins)) {
    /* Non-blocking communicators: the window calls go on in the background
     * (ncclInProgress), after the operations are issued, which so see
     * every window they name still registered, as in call order. */
    ops_res = ops ? ops_launch(ops) : ncclSuccess;
    win_res = mpn_win_async_group(wins);
  } else {
    win_res = wins ? mpn_win_jobs_run(wins) : ncclSuccess;
    /* The window calls' failure is returned: its text too, not that of an
     * operation refused after it. */
    char win_text[sizeof(group_error_text)];
    if (win_res != ncclSuccess) snprintf(win_text, sizeof(win_text), "%s", mpn_error_last(NULL));
    ops_res = ops ? ops_launch(ops) : ncclSuccess;
    if (win_res != ncclSuccess && ops_res != ncclSuccess) mpn_error_set(NULL, win_res, "%s", win_text);
  }
  if (win_res != ncclSuccess && win_res != ncclInProgress) return win_res;
  if (ops_res != ncclSuccess) return ops_res;
  return win_res == ncclInProgress ? win_res : res;
}

ncclResult_t mpn_group_add_op(const mpn_op_t* op) {
  mpn_op_t* copy = op_new();
  if (copy == NULL) {
    free(op->descs); /* owned by the op from here on, refused or not */
    return mpn_group_fail(mpn_error_set(NULL, ncclSystemError, "out of memory"));
  }
  *copy = *op;
  copy->comm_serial = op->comm->serial; /* (checked live by the caller) */
  copy->next = NULL;
  if (group.ops_tail) group.ops_tail->next = copy;
  else group.ops = copy;
  group.ops_tail = copy;
  if (group.depth > 0) return ncclSuccess;
  return group_flush();
}

uint64_t mpn_group_queued(const struct ncclComm* comm, mpn_op_kind_t kind, int peer, int ctx) {
  uint64_t n = 0;
  for (const mpn_op_t* op = group.ops; op; op = op->next) {
    if (op->comm != comm || op->kind != kind) continue;
    n += kind == MPN_OP_WAIT_SIGNAL ? mpn_descs_wanted(op->descs, op->ndesc, peer, ctx) : (uint64_t)(op->peer == peer);
  }
  return n;
}

ncclResult_t mpn_group_add_job(mpn_init_job_t* job) {
  job->next = NULL;
  if (group.jobs_tail) group.jobs_tail->next = job;
  else group.jobs = job;
  group.jobs_tail = job;
  if (group.depth > 0) return ncclSuccess;
  return group_flush();
}

ncclResult_t mpn_group_add_win(mpn_win_job_t* job) {
  job->next = NULL;
  if (group.wins_tail)
    group.wins_tail->next = job;
  else
    group.wins = job;
  group.wins_tail = job;
  return ncclSuccess;
}

int mpn_group_has_job_of(const struct ncclComm* comm) {
  for (const mpn_init_job_t* job = group.jobs; job; job = job->next)
    if (job->comm == comm || job->parent == comm) return 1;
  for (const mpn_win_job_t* job = group.wins; job; job = job->next)
    if (job->comm == comm) return 1;
  return 0;
}

MPN_API(ncclResult_t, ncclGroupStart, void) {
  /* NCCL has no bound; ours keeps the count from overflowing and tells a
   * loop that misses its ncclGroupEnd (whose operations would never run)
   * long before that.  The group then fails as a whole. */
  if (group.depth >= MPN_GROUP_MAX_DEPTH)
    return mpn_group_fail(MPN_REFUSE(NULL, ncclInvalidUsage,
                                     "ncclGroupStart: groups are nested %d deep already, the most mpinccl allows; "
                                     "is a ncclGroupEnd missing?",
                                     group.depth));
  group.depth++;
  return ncclSuccess;
}

MPN_API(ncclResult_t, ncclGroupEnd, void) {
  if (group.depth == 0)
    return MPN_REFUSE(NULL, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart is open");
  if (--group.depth > 0) return ncclSuccess;
  return group_flush();
}
