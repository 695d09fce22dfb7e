/*
 * alias.c - per-device stream handles in launches that span GPUs (alias.h):
 * the fork before a launch's work and the join after it, on streams and
 * events each communicator makes the first time it needs them.
 */
#include "core/alias.h"

#include <stdlib.h>

#include "core/comm.h"
#include "core/error.h"
#include "cuda/device.h"

static int handle_index(cudaStream_t s) {
  if (s == NULL) return 0;
  if (s == cudaStreamLegacy) return 1;
  if (s == cudaStreamPerThread) return 2;
  return -1;
}

/* A stream of a communicator's for one handle; several where launches of
 * different threads or captures need one at once (list, pushed only). */
struct mpn_alias_stream {
  cudaStream_t s;
  cudaEvent_t fork, join;
  int busy; /* a launch forked it and has not joined it yet (atomic) */
  struct mpn_alias_stream* next;
};

struct mpn_alias_move {
  cudaStream_t user; /* the handle, on dev */
  int dev;
  struct mpn_alias_stream* alias;
};

/* Whether a, taken, may serve an op: it is in no graph capture, or in the
 * op's (a capture stays open until its owner ends it, after the join). */
static int alias_fits(const struct mpn_alias_stream* a, const mpn_op_t* op) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  cudaError_t err = cudaStreamGetCaptureInfo(a->s, &st, &id, NULL, NULL, NULL, NULL);
  mpn_cuda_relaxed_leave(mode);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return st == cudaStreamCaptureStatusNone ||
         (st == cudaStreamCaptureStatusActive && op->capturing && id == op->capture_id);
}

static ncclResult_t alias_new(struct ncclComm* comm, int h, struct mpn_alias_stream** out) {
  struct mpn_alias_stream* a = calloc(1, sizeof(*a));
  if (a == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter(); /* the caller's stream may be capturing */
  cudaError_t err = cudaStreamCreateWithFlags(&a->s, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&a->fork, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&a->join, cudaEventDisableTiming);
  mpn_cuda_relaxed_leave(mode);
  if (err != cudaSuccess) {
    if (a->fork) mpn_cuda_forget(cudaEventDestroy(a->fork));
    if (a->s) mpn_cuda_forget(cudaStreamDestroy(a->s));
    free(a);
    return mpn_cuda_result(comm, err, "a stream for a default stream handle used on several GPUs");
  }
  a->busy = 1;
  a->next = __atomic_load_n(&comm->alias[h], __ATOMIC_ACQUIRE);
  while (!__atomic_compare_exchange_n(&comm->alias[h], &a->next, a, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
  *out = a;
  return ncclSuccess;
}

/* An alias of the op's communicator for the op's handle, taken (busy) for
 * the launch: a free one that fits, else a new one (on the op's device,
 * current). */
static ncclResult_t alias_take(const mpn_op_t* op, int h, struct mpn_alias_stream** out) {
  for (struct mpn_alias_stream* a = __atomic_load_n(&op->comm->alias[h], __ATOMIC_ACQUIRE); a; a = a->next) {
    int idle = 0;
    if (!__atomic_compare_exchange_n(&a->busy, &idle, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
    if (alias_fits(a, op)) {
      *out = a;
      return ncclSuccess;
    }
    __atomic_store_n(&a->busy, 0, __ATOMIC_RELEASE);
  }
  return alias_new(op->comm, h, out);
}

/* Whether op's handle names one stream per device and another device of
 * the launch came first with it (first: the first op of each handle). */
static int moved(const mpn_op_t* op, mpn_op_t* first[MPN_ALIAS_HANDLES]) {
  int h = handle_index(op->stream);
  if (h < 0) return 0;
  if (first[h] == NULL) first[h] = (mpn_op_t*)op;
  return first[h]->comm->cuda_dev != op->comm->cuda_dev;
}

static struct mpn_alias_move* move_find(mpn_alias_t* a, const mpn_op_t* op) {
  for (int i = 0; i < a->n; i++)
    if (a->moves[i].user == op->stream && a->moves[i].dev == op->comm->cuda_dev) return &a->moves[i];
  return NULL;
}

/* Joins the first n moves of a (forked) back into their handles' streams and
 * lets every move's alias go; the first failure. */
static ncclResult_t moves_join(mpn_alias_t* a, int n, int* current) {
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < a->n; i++) {
    struct mpn_alias_move* m = &a->moves[i];
    if (i < n) {
      mpn_cuda_switch_device(current, m->dev);
      cudaError_t err = cudaEventRecord(m->alias->join, m->alias->s);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(m->user, m->alias->join, 0);
      if (err != cudaSuccess)
        mpn_keep(&first, mpn_cuda_result(NULL, err, "joining a default stream used on several GPUs"));
    }
    __atomic_store_n(&m->alias->busy, 0, __ATOMIC_RELEASE);
  }
  return first;
}

/* Finds the launch's moves and takes an alias for each (a->moves has room
 * for one per moved op), enqueueing nothing; then forks each.  On failure
 * nothing stays forked or taken. */
static ncclResult_t moves_fork(mpn_op_t* lists[2], mpn_alias_t* a, int* current) {
  mpn_op_t* first[MPN_ALIAS_HANDLES] = {NULL, NULL, NULL};
  ncclResult_t res = ncclSuccess;
  for (int k = 0; k < 2 && res == ncclSuccess; k++)
    for (mpn_op_t* op = lists[k]; op && res == ncclSuccess; op = op->next) {
      if (!moved(op, first) || move_find(a, op)) continue;
      struct mpn_alias_move* m = &a->moves[a->n];
      m->user = op->stream;
      m->dev = op->comm->cuda_dev;
      mpn_cuda_switch_device(current, m->dev);
      res = alias_take(op, handle_index(op->stream), &m->alias);
      if (res == ncclSuccess) a->n++;
    }
  int forked = 0;
  for (; forked < a->n && res == ncclSuccess; forked++) {
    struct mpn_alias_move* m = &a->moves[forked];
    mpn_cuda_switch_device(current, m->dev);
    /* After everything the caller enqueued on the handle there. */
    cudaError_t err = cudaEventRecord(m->alias->fork, m->user);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(m->alias->s, m->alias->fork, 0);
    if (err != cudaSuccess) {
      res = mpn_cuda_result(NULL, err, "forking a default stream used on several GPUs");
      break; /* this one's wait did not take: nothing to join */
    }
  }
  if (res != ncclSuccess) moves_join(a, forked, current); /* (a capture must not keep an unjoined stream) */
  return res;
}

int mpn_alias_select(mpn_op_t* lists[2], unsigned char* out) {
  mpn_op_t* first[MPN_ALIAS_HANDLES] = {NULL, NULL, NULL};
  int i = 0, n = 0;
  for (int k = 0; k < 2; k++)
    for (mpn_op_t* op = lists[k]; op; op = op->next, i++) {
      int m = moved(op, first);
      if (out) out[i] = (unsigned char)m;
      n += m;
    }
  return n;
}

ncclResult_t mpn_alias_fork(mpn_op_t* lists[2], mpn_alias_t* a) {
  a->n = 0;
  a->moves = NULL;
  int moved_ops = mpn_alias_select(lists, NULL);
  if (moved_ops == 0) return ncclSuccess;
  a->moves = calloc((size_t)moved_ops, sizeof(*a->moves)); /* (a move per moved op at most) */
  if (a->moves == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  int saved = mpn_cuda_device_enter(-1), current = saved;
  ncclResult_t res = moves_fork(lists, a, &current);
  if (res == ncclSuccess)
    for (int k = 0; k < 2; k++)
      for (mpn_op_t* op = lists[k]; op; op = op->next) {
        struct mpn_alias_move* m = move_find(a, op);
        if (m) {
          op->stream = m->alias->s;
          op->stream_id = 0; /* (the handle's: the launches ask the alias's) */
        }
      }
  if (saved >= 0) mpn_cuda_switch_device(&current, saved);
  if (res != ncclSuccess) {
    free(a->moves);
    a->moves = NULL;
    a->n = 0;
  }
  return res;
}

ncclResult_t mpn_alias_join(mpn_alias_t* a) {
  if (a->moves == NULL) return ncclSuccess;
  int saved = mpn_cuda_device_enter(-1), current = saved;
  ncclResult_t first = moves_join(a, a->n, &current);
  if (saved >= 0) mpn_cuda_switch_device(&current, saved);
  free(a->moves);
  a->moves = NULL;
  a->n = 0;
  return first;
}

void mpn_alias_free(struct ncclComm* comm) {
  int saved = -2;
  for (int h = 0; h < MPN_ALIAS_HANDLES; h++)
    for (struct mpn_alias_stream *a = comm->alias[h], *next; a; a = next) {
      next = a->next;
      if (saved == -2) saved = mpn_cuda_device_enter(comm->cuda_dev);
      mpn_cuda_forget(cudaEventDestroy(a->join));
      mpn_cuda_forget(cudaEventDestroy(a->fork));
      mpn_cuda_forget(cudaStreamDestroy(a->s)); /* its work, if any, still runs */
      free(a);
    }
  for (int h = 0; h < MPN_ALIAS_HANDLES; h++) comm->alias[h] = NULL;
  if (saved != -2) mpn_cuda_device_leave(saved);
}
