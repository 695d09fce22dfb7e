/*
 * graph.c - ncclSend/ncclRecv with UCX peers captured in a CUDA graph.
 *
 * The uncaptured path (staged.c) arms proxy operations from the API thread
 * with running counts, which a replay would not repeat.  A captured group
 * instead stages each message whole through pinned memory of its own, and
 * a host node of the graph posts that replay's UCX operations.  Per
 * capturing stream, on a side stream forked from it where the group starts:
 *   a wait for the sends of the previous replay (their staging is reused;
 *   every word starts at 1: nothing is under way before the first replay);
 *   the device-to-host copies of the sends;
 *   one host node that sets the group's completion words to 0 and posts
 *   every send and receive to the proxy (it makes no CUDA call and never
 *   waits: host functions of a process run on one thread);
 *   a stream wait for each receive's word;
 *   the host-to-device copies of the receives;
 * and the capturing stream waits for the side stream where the group ends.
 * The n-th captured send to a peer matches that peer's n-th captured
 * receive (tags of their own, mpn_ucx_graph_tag), and every replay repeats
 * them: UCX matches the messages of one endpoint in order, so both sides
 * must capture alike and replay their graphs in the same order (the number
 * is kept modulo 64).  A replay does not wait for its sends to be taken
 * (as the uncaptured path does not), so a send and its receive may be in
 * separate groups.  What a capture allocates (it switches the thread to
 * relaxed capture mode for that) lives until the graph is destroyed: a
 * CUDA user object on the graph tells (ucx/gone.h), and the communicator's next
 * captured launch frees the groups whose graph is gone and whose sends
 * have all been taken (mpn_ucx_graph_reclaim); at the communicator's end
 * those whose graph lives on are kept whole, their host nodes dead (a
 * graph must not be replayed then: its replays move nothing), until the
 * graph is gone.
 */
#include "ucx/graph.h"
#include "ucx/gone.h"
#include "ucx/node_guard.h"
#include "ucx/orphans.h"

#include <cuda.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "cuda/device.h"
#include "cuda/driver.h"
#include "cuda/memop.h"
#include "ucx/net.h"
#include "ucx/net_comm.h"

typedef struct {
  struct ncclComm* comm;
  mpn_op_t* op;     /* valid during the launch only */
  int send, peer;
  char* stage;      /* pinned, op->bytes */
  size_t bytes;
  uint64_t tag;
} gpost_t;

struct mpn_ucx_ggroup {
  mpn_ucx_gone_t* gone; /* shared with the user object on its graph; NULL: kept until the communicator goes */
  cudaStream_t user, side;
  cudaEvent_t fork, join;
  int n;
  gpost_t* posts;
  uint64_t* words;  /* pinned, mapped: one per post, set by the proxy */
  CUdeviceptr dwords;
  int error;        /* an ncclResult_t, set by the proxy */
  mpn_ucx_node_guard_t guard; /* against group_free */
  struct mpn_ucx_ggroup* next;
};

/* Groups of this thread's launch under way (fork to launch), then owned by
 * their communicator's list (mpn_ucx_graph_free). */
static __thread mpn_ucx_ggroup_t* pending;

/* Groups made and freed whole, in the whole process (mpn_ucx_graph_held). */
static uint64_t groups_made, groups_destroyed;

/* On CUDA's thread, once the graph is gone: no lock, no CUDA call. */
static void graph_gone(void* arg) { mpn_ucx_gone_set(arg); }

/* Also while this thread captures (a failed fork): in relaxed mode.  A
 * replay may still be queued (its host node not yet run, or running): the
 * group is marked dead, which its host node checks, the node running now
 * is waited for, and the group itself and its words stay, so a late node
 * reads only the mark and a queued wait reads mapped memory (group_destroy
 * frees them where no replay can come). */
static void group_free(mpn_ucx_ggroup_t* g, int leak) {
  mpn_ucx_gone_drop(g->gone);
  mpn_ucx_node_kill(&g->guard);
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  for (int i = 0; i < g->n; i++)
    if (g->posts[i].stage && !leak) mpn_cuda_forget(cudaFreeHost(g->posts[i].stage));
  if (g->side) mpn_cuda_forget(cudaStreamDestroy(g->side));
  if (g->fork) mpn_cuda_forget(cudaEventDestroy(g->fork));
  if (g->join) mpn_cuda_forget(cudaEventDestroy(g->join));
  mpn_cuda_relaxed_leave(mode);
  free(g->posts);
  g->posts = NULL;
  g->n = 0;
}

/* What group_free keeps, where nothing can read it any more: a group whose
 * graph is gone (CUDA released it once every launch of it was done) and
 * whose commands the proxy no longer holds, or one never captured. */
static void group_destroy(mpn_ucx_ggroup_t* g) {
  group_free(g, 0);
  if (g->words) {
    mpn_capture_mode_t mode = mpn_cuda_relaxed_enter(); /* (a reclaim runs during a capture) */
    mpn_cuda_forget(cudaFreeHost(g->words));
    mpn_cuda_relaxed_leave(mode);
  }
  free(g);
  __atomic_add_fetch(&groups_destroyed, 1, __ATOMIC_RELAXED);
}

/* The host node: this replay's UCX operations. */
static void CUDART_CB post_all(void* arg) {
  mpn_ucx_ggroup_t* g = arg;
  if (!mpn_ucx_node_enter(&g->guard)) return; /* its communicator is gone */
  for (int i = 0; i < g->n; i++) {
    gpost_t* p = &g->posts[i];
    __atomic_store_n(&g->words[i], 0, __ATOMIC_RELEASE);
    if (mpn_ucx_tagged_on(p->comm, p->send, p->peer, p->stage, p->bytes, p->tag, NULL, NULL, &g->words[i], 1, &g->error,
                          NULL, 0) != ncclSuccess) {
      int ok = ncclSuccess; /* the communicator reports it (ncclCommGetAsyncError) */
      __atomic_compare_exchange_n(mpn_ucx_comm_error(p->comm), &ok, (int)ncclSystemError, 0,
                                  __ATOMIC_RELEASE, __ATOMIC_RELAXED);
      __atomic_store_n(&g->error, (int)ncclSystemError, __ATOMIC_RELEASE);
      __atomic_store_n(&g->words[i], 1, __ATOMIC_RELEASE); /* nothing will come: let the stream go */
    }
  }
  mpn_ucx_node_leave(&g->guard);
}

/* What a capture allocates, in relaxed mode (else the capture refuses it). */
static ncclResult_t group_alloc(mpn_ucx_ggroup_t* g) {
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  cudaError_t err = cudaStreamCreateWithFlags(&g->side, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g->fork, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&g->join, cudaEventDisableTiming);
  if (err == cudaSuccess) err = mpn_cuda_host_mapped((size_t)g->n * sizeof(uint64_t), (void**)&g->words, &g->dwords);
  for (int i = 0; err == cudaSuccess && i < g->n; i++) g->words[i] = 1; /* nothing under way before the first replay */
  for (int i = 0; i < g->n && err == cudaSuccess; i++)                  /* (a message of no bytes has no staging) */
    if (g->posts[i].bytes > 0)
      err = cudaHostAlloc((void**)&g->posts[i].stage, g->posts[i].bytes, cudaHostAllocPortable);
  mpn_cuda_relaxed_leave(mode);
  return mpn_cuda_result(NULL, err, "allocating the staging of a captured transfer over UCX");
}

/* The side stream's work, forked from g->user now. */
static ncclResult_t group_issue(const mpn_driver_t* drv, mpn_ucx_ggroup_t* g) {
  ncclResult_t first = ncclSuccess;
  mpn_keep(&first, mpn_cuda_result(NULL, cudaEventRecord(g->fork, g->user), "recording where a group starts"));
  mpn_keep(&first, mpn_cuda_result(NULL, cudaStreamWaitEvent(g->side, g->fork, 0), "forking a captured UCX group"));
  if (first != ncclSuccess) return first; /* the side stream is not in the capture */
  mpn_memops_t b;
  mpn_memops_init(&b, drv, g->side);
  for (int i = 0; i < g->n; i++) /* the previous replay's sends, whose staging is reused */
    if (g->posts[i].send)
      mpn_keep(&first, mpn_memops_add(&b, g->dwords + (CUdeviceptr)i * sizeof(uint64_t), 1, MPN_MEMOP_WAIT_GEQ));
  mpn_keep(&first, mpn_memops_flush(&b));
  for (int i = 0; i < g->n; i++)
    if (g->posts[i].send && g->posts[i].bytes > 0)
      mpn_keep(&first, mpn_cuda_result(NULL,
                                       cudaMemcpyAsync(g->posts[i].stage, g->posts[i].op->buf, g->posts[i].bytes,
                                                       cudaMemcpyDeviceToHost, g->side),
                                       "staging a captured send"));
  mpn_keep(&first, mpn_cuda_result(NULL, cudaLaunchHostFunc(g->side, post_all, g), "capturing the UCX posts"));
  mpn_memops_init(&b, drv, g->side);
  for (int i = 0; i < g->n; i++)
    if (!g->posts[i].send)
      mpn_keep(&first, mpn_memops_add(&b, g->dwords + (CUdeviceptr)i * sizeof(uint64_t), 1, MPN_MEMOP_WAIT_GEQ));
  mpn_keep(&first, mpn_memops_flush(&b));
  for (int i = 0; i < g->n; i++)
    if (!g->posts[i].send && g->posts[i].bytes > 0)
      mpn_keep(&first, mpn_cuda_result(NULL,
                                       cudaMemcpyAsync(g->posts[i].op->buf, g->posts[i].stage, g->posts[i].bytes,
                                                       cudaMemcpyHostToDevice, g->side),
                                       "copying a captured receive to the device"));
  mpn_keep(&first, mpn_cuda_result(NULL, cudaEventRecord(g->join, g->side), "recording a captured group's end"));
  return first;
}

/* The group of ops[i]'s stream and communicator: its captured messages in
 * program order, numbered (numbers[j] for ops[j]) in the launch's order. */
static ncclResult_t group_make(mpn_op_t** ops, const uint64_t* numbers, int n, int i, mpn_ucx_ggroup_t** out) {
  mpn_ucx_ggroup_t* g = calloc(1, sizeof(*g));
  gpost_t* posts = calloc((size_t)n, sizeof(*posts));
  if (g == NULL || posts == NULL) {
    free(g), free(posts);
    return mpn_error_set(NULL, ncclSystemError, "out of memory");
  }
  g->user = ops[i]->stream;
  g->posts = posts;
  for (int j = i; j < n; j++) {
    mpn_op_t* op = ops[j];
    if (op->stream != g->user || op->comm != ops[i]->comm) continue;
    int send = op->kind == MPN_OP_SEND;
    uint64_t k = numbers[j];
    int src = send ? op->comm->rank : op->peer, dst = send ? op->peer : op->comm->rank;
    posts[g->n++] = (gpost_t){.comm = op->comm, .op = op, .send = send, .peer = op->peer,
                              .bytes = op->bytes, .tag = mpn_ucx_graph_tag(op->comm, src, dst, k)};
  }
  __atomic_add_fetch(&groups_made, 1, __ATOMIC_RELAXED);
  *out = g;
  return ncclSuccess;
}

/*
 * One group per capturing stream and communicator (each communicator's
 * destroy finds its groups: mpn_ucx_graph_keep).  The messages are numbered
 * in the launch's order first, whichever stream each is on: the n-th
 * capture of a pair must match the peer's n-th, as it would with the
 * messages on several streams of one group.
 */
ncclResult_t mpn_ucx_graph_fork(const mpn_driver_t* drv, mpn_op_t** ops, int n) {
  uint64_t* numbers = calloc((size_t)(n ? n : 1), sizeof(*numbers));
  if (numbers == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  for (int i = 0; i < n; i++)
    if (ops[i]->capturing) numbers[i] = mpn_ucx_graph_count(ops[i]->comm, ops[i]->peer, ops[i]->kind == MPN_OP_SEND);
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n; i++) {
    if (!ops[i]->capturing) continue;
    /* Ops of one stream and communicator (one device) are all captured or
     * none, capture_check having asked the stream; group_make relies on it. */
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = ops[j]->stream == ops[i]->stream && ops[j]->comm == ops[i]->comm;
    if (seen) continue;
    mpn_keep(&first, mpn_cuda_set_device(ops[i]->comm->cuda_dev));
    mpn_ucx_ggroup_t* g = NULL;
    ncclResult_t res = group_make(ops, numbers, n, i, &g);
    if (res == ncclSuccess) res = group_alloc(g);
    if (res == ncclSuccess) {
      res = group_issue(drv, g); /* on failure the side stream may be in the capture: join it */
    } else if (g != NULL) {
      group_destroy(g); /* (nothing of it was captured) */
      g = NULL;
    }
    mpn_keep(&first, res);
    if (g == NULL) continue;
    g->next = pending;
    pending = g;
  }
  free(numbers);
  return first;
}

/* Hangs on g's graph the user object that tells when it is gone; without
 * it (CUDA refused, out of memory) g stays until the communicator goes. */
static void group_watch(mpn_ucx_ggroup_t* g, const struct ncclComm* comm) {
  mpn_ucx_gone_t* t = mpn_ucx_gone_create();
  if (t == NULL) return;
  mpn_cuda_forget(cudaSetDevice(comm->cuda_dev)); /* (no result: what fails shows below) */
  if (mpn_cuda_capture_on_destroy(g->user, graph_gone, t) == ncclSuccess) {
    g->gone = t;
    return;
  }
  free(t); /* (graph_gone is never called then) */
  MPN_WARN("rank %d: the staging of a captured group over UCX will be kept until the communicator goes (%s)",
           comm->rank, mpn_error_last(NULL));
}

/* Whether g's graph is gone and its sends were all taken (the proxy no
 * longer touches its staging or words).  Not after a failure: a send the
 * peer will never take has its word raised while the proxy still holds it
 * (mpn_ucx_proxy_release_sends, after a size mismatch), so such a group
 * goes with the communicator, after the proxy let go of its commands. */
static int group_done(const mpn_ucx_ggroup_t* g) {
  if (!mpn_ucx_gone_is(g->gone) || __atomic_load_n(&g->error, __ATOMIC_ACQUIRE) != 0) return 0;
  for (int i = 0; i < g->n; i++)
    if (__atomic_load_n(&g->words[i], __ATOMIC_ACQUIRE) == 0) return 0;
  return 1;
}

void mpn_ucx_graph_reclaim(mpn_ucx_ggroup_t** list) {
  mpn_ucx_orphans_reap();
  for (mpn_ucx_ggroup_t** at = list; *at;) {
    mpn_ucx_ggroup_t* g = *at;
    if (!group_done(g)) {
      at = &g->next;
      continue;
    }
    *at = g->next;
    group_destroy(g);
  }
}

uint64_t mpn_ucx_graph_held(void) {
  return __atomic_load_n(&groups_made, __ATOMIC_RELAXED) - __atomic_load_n(&groups_destroyed, __ATOMIC_RELAXED);
}

int mpn_ucx_graph_live(const mpn_ucx_ggroup_t* list) {
  int n = 0;
  for (; list; list = list->next) n++;
  return n;
}

ncclResult_t mpn_ucx_graph_join(mpn_op_t** ops, int n) {
  ncclResult_t first = ncclSuccess;
  while (pending) {
    mpn_ucx_ggroup_t* g = pending;
    pending = g->next;
    mpn_keep(&first, mpn_cuda_result(NULL, cudaStreamWaitEvent(g->user, g->join, 0), "joining a captured UCX group"));
    struct ncclComm* comm = g->posts[0].comm;
    group_watch(g, comm);
    for (int i = 0; i < g->n; i++) g->posts[i].op = NULL; /* the ops go with the launch */
    mpn_ucx_graph_keep(comm, g);
  }
  (void)ops, (void)n;
  return first;
}

int mpn_ucx_graph_quiesce(mpn_ucx_ggroup_t* list, const int* error, uint64_t deadline) {
  for (mpn_ucx_ggroup_t* g = list; g; g = g->next)
    for (int i = 0; i < g->n; i++)
      while (__atomic_load_n(&g->words[i], __ATOMIC_ACQUIRE) == 0) {
        if (__atomic_load_n(error, __ATOMIC_ACQUIRE) != ncclSuccess || mpn_clock_now_ns() > deadline) return 0;
        usleep(20);
      }
  return 1;
}

void mpn_ucx_graph_kill_list(mpn_ucx_ggroup_t* list) {
  for (mpn_ucx_ggroup_t* g = list; g; g = g->next) mpn_ucx_node_kill(&g->guard);
}

/* group_destroy for a kept group (orphans.h). */
static void orphan_free(void* g) { group_destroy(g); }

void mpn_ucx_graph_free_list(mpn_ucx_ggroup_t* list, int leak) {
  mpn_ucx_orphans_reap();
  for (mpn_ucx_ggroup_t *g = list, *next; g; g = next) {
    next = g->next;
    /* A group whose graph lives is kept whole, its node dead (a replay
     * posts nothing); one that failed stays too (as group_done tells), as
     * does one whose graph cannot tell it is gone. */
    int failed = __atomic_load_n(&g->error, __ATOMIC_ACQUIRE) != 0;
    if (!leak && !failed && mpn_ucx_gone_is(g->gone)) {
      group_destroy(g);
    } else if (!leak && !failed && g->gone != NULL) {
      mpn_ucx_node_kill(&g->guard); /* (first: once kept, a reap may free it at once) */
      if (!mpn_ucx_orphan_keep(g->gone, orphan_free, g)) group_free(g, leak);
    } else {
      group_free(g, leak);
    }
  }
}

void mpn_ucx_graph_push(mpn_ucx_ggroup_t** list, mpn_ucx_ggroup_t* g) {
  g->next = *list;
  *list = g;
}
