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

/* The handles that name one stream per device, each with an alias of its own. */
enum { HANDLES = 3 };

static int handle_index(cudaStream_t s) {
  if (s == NULL) return 0;
  if (s == cudaStreamLegacy) return 1;
  if (s == cudaStreamPerThread) return 2;
  return -1;
}

struct mpn_alias_stream {
  cudaStream_t s;
  cudaEvent_t fork, join;
};

struct mpn_alias_move {
  cudaStream_t user; /* the handle, on dev */
  int dev;
  struct mpn_alias_stream* alias;
};

/* comm's alias for handle h, made on first use on comm's device (current). */
static ncclResult_t alias_get(struct ncclComm* comm, int h, struct mpn_alias_stream** out) {
  struct mpn_alias_stream* a = __atomic_load_n(&comm->alias[h], __ATOMIC_ACQUIRE);
  if (a) {
    *out = a;
    return ncclSuccess;
  }
  a = calloc(1, sizeof(*a));
  if (a == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter(); /* the caller's stream may be capturing */
  cudaError_t err = cudaStreamCreateWithFlags(&a->s, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&a->fork, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&a->join, cudaEventDisableTiming);
  mpn_cuda_relaxed_leave(mode);
  if (err != cudaSuccess) {
    if (a->fork) cudaEventDestroy(a->fork);
    if (a->s) cudaStreamDestroy(a->s);
    free(a);
    return mpn_cuda_result(comm, err, "a stream for a default stream handle used on several GPUs");
  }
  struct mpn_alias_stream* none = NULL;
  if (!__atomic_compare_exchange_n(&comm->alias[h], &none, a, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    cudaEventDestroy(a->join); /* another thread's launch made one first */
    cudaEventDestroy(a->fork);
    cudaStreamDestroy(a->s);
    free(a);
    a = none;
  }
  *out = a;
  return ncclSuccess;
}

/* Whether op's handle names one stream per device and another device of
 * the launch came first with it (first: the first op of each handle). */
static int moved(const mpn_op_t* op, mpn_op_t* first[HANDLES]) {
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

/* Finds the launch's moves and forks each (a->moves has room for one per op). */
static ncclResult_t moves_fork(mpn_op_t* lists[2], mpn_alias_t* a, int* current) {
  mpn_op_t* first[HANDLES] = {NULL, NULL, NULL};
  for (int k = 0; k < 2; k++)
    for (mpn_op_t* op = lists[k]; op; op = op->next) {
      if (!moved(op, first) || move_find(a, op)) continue;
      struct mpn_alias_move* m = &a->moves[a->n];
      m->user = op->stream;
      m->dev = op->comm->cuda_dev;
      mpn_cuda_switch_device(current, m->dev);
      MPN_CHECK(alias_get(op->comm, handle_index(op->stream), &m->alias));
      a->n++;
      /* After everything the caller enqueued on the handle there. */
      cudaError_t err = cudaEventRecord(m->alias->fork, m->user);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(m->alias->s, m->alias->fork, 0);
      if (err != cudaSuccess) return mpn_cuda_result(op->comm, err, "forking a default stream used on several GPUs");
    }
  return ncclSuccess;
}

ncclResult_t mpn_alias_fork(mpn_op_t* lists[2], mpn_alias_t* a) {
  a->n = 0;
  a->moves = NULL;
  mpn_op_t* first[HANDLES] = {NULL, NULL, NULL};
  int n_ops = 0, any = 0;
  for (int k = 0; k < 2; k++)
    for (mpn_op_t* op = lists[k]; op; op = op->next, n_ops++) any |= moved(op, first);
  if (!any) return ncclSuccess;
  a->moves = calloc((size_t)n_ops, sizeof(*a->moves));
  if (a->moves == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  int saved = mpn_cuda_device_enter(-1), current = saved;
  ncclResult_t res = moves_fork(lists, a, &current);
  if (res == ncclSuccess) /* forks already made only make their alias wait */
    for (int k = 0; k < 2; k++)
      for (mpn_op_t* op = lists[k]; op; op = op->next) {
        struct mpn_alias_move* m = move_find(a, op);
        if (m) op->stream = m->alias->s;
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
  ncclResult_t first = ncclSuccess;
  int saved = mpn_cuda_device_enter(-1), current = saved;
  for (int i = 0; i < a->n; i++) {
    struct mpn_alias_move* m = &a->moves[i];
    mpn_cuda_switch_device(&current, m->dev);
    cudaError_t err = cudaEventRecord(m->alias->join, m->alias->s);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(m->user, m->alias->join, 0);
    if (err != cudaSuccess)
      mpn_keep(&first, mpn_cuda_result(NULL, err, "joining a default stream used on several GPUs"));
  }
  if (saved >= 0) mpn_cuda_switch_device(&current, saved);
  free(a->moves);
  a->moves = NULL;
  a->n = 0;
  return first;
}

void mpn_alias_free(struct ncclComm* comm) {
  int saved = -2;
  for (int h = 0; h < HANDLES; h++) {
    struct mpn_alias_stream* a = comm->alias[h];
    if (a == NULL) continue;
    if (saved == -2) saved = mpn_cuda_device_enter(comm->cuda_dev);
    cudaEventDestroy(a->join);
    cudaEventDestroy(a->fork);
    cudaStreamDestroy(a->s); /* its work, if any, still runs */
    free(a);
    comm->alias[h] = NULL;
  }
  if (saved != -2) mpn_cuda_device_leave(saved);
}
