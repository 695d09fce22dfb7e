/*
 * gnodes.c - the host-node state of one-sided calls over UCX captured in
 * CUDA graphs (winstage.c captures them): kept while a replay may run its
 * host node or the proxy may still hold one of its commands, then freed at
 * the communicator's next captured one-sided launch (or with it; one whose
 * graphs outlive the communicator, once they are gone).
 *
 * Two things must both hold before a gnode goes.  Its graphs are gone: the
 * launch's record on each graph (p2p/graphs.c) sets the gnode's mark
 * (ucx/gone.h) once CUDA released it, which it does after the graph and
 * every executable graph made from it are destroyed and their launches
 * done.  And the proxy holds none of its commands: it copies each command,
 * but the copy's buffer and words point into the gnode, and a replay does
 * not wait for its puts' completions, so a count of the commands in flight
 * (mpn_ucx_cmd_t pending: the host node adds 1 before posting, the proxy
 * takes 1 after its last write) tells.  Several commands, of one replay
 * or of several, share the gnode's completion word, which cannot tell.
 */
#include "ucx/gnodes.h"

#include <stdlib.h>

#include "core/comm.h"
#include "core/error.h"
#include "cuda/device.h"
#include "ucx/net_comm.h"
#include "ucx/orphans.h"

ncclResult_t mpn_ucx_gnode_create(struct ncclComm* comm, int n, size_t stage, mpn_ucx_gnode_t** out) {
  mpn_ucx_gnode_t* g = calloc(1, sizeof(*g));
  mpn_ucx_cmd_t* cmds = calloc((size_t)n, sizeof(*cmds));
  if (g == NULL || cmds == NULL) {
    free(g), free(cmds);
    return mpn_error_set(comm, ncclSystemError, "out of memory");
  }
  g->comm = comm;
  g->n = n;
  g->cmds = cmds;
  cudaError_t err = cudaSuccess;
  if (stage) { /* while capturing: in relaxed mode */
    mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
    err = cudaHostAlloc((void**)&g->stage, stage, cudaHostAllocPortable);
    mpn_cuda_relaxed_leave(mode);
  }
  if (err != cudaSuccess) {
    free(cmds), free(g);
    return mpn_cuda_result(comm, err, "staging a captured put over UCX");
  }
  *out = g;
  return ncclSuccess;
}

mpn_ucx_cmd_t mpn_ucx_gnode_cmd(mpn_ucx_gnode_t* g, int peer) {
  struct ncclComm* comm = g->comm;
  return (mpn_ucx_cmd_t){.kind = MPN_UCX_PUT_SIGNAL,
                         .owner = comm->ucx,
                         .peer = mpn_ucx_comm_peer(comm, peer),
                         .flag = &g->done,
                         .value = 1,
                         .error = &g->error,
                         .owner_error = mpn_ucx_comm_error(comm),
                         .failure = mpn_ucx_comm_failure(comm),
                         .from = peer,
                         .pending = &g->pending};
}

void mpn_ucx_gnode_gone(void* owner, uint32_t slot, uint64_t seq, int side) {
  (void)slot, (void)side;
  if (seq) /* (setting the mark lets go of the record's hold too) */
    mpn_ucx_gone_set(owner);
  else
    mpn_ucx_gone_drop(owner);
}

void mpn_ucx_gnode_watch(mpn_ucx_gnode_t* g, mpn_graph_holds_t** holds, cudaStream_t s, int dev) {
  mpn_ucx_gone_t* t = mpn_ucx_gone_create();
  if (t == NULL) return; /* never marked: kept until the communicator goes */
  g->gone = t;
  /* Signal number 1 is news of a graph gone; 0 would say that none was. */
  mpn_graph_holds_add_to(holds, s, dev, mpn_ucx_gnode_gone, t, 0, 1, 0);
}

/* The host node: this replay's commands, each counted in flight before
 * the proxy may see it. */
static void CUDART_CB gnode_post(void* arg) {
  mpn_ucx_gnode_t* g = arg;
  if (!mpn_ucx_node_enter(&g->guard)) return; /* its communicator is gone */
  if (g->zero) __atomic_store_n(g->zero, 0, __ATOMIC_RELEASE);
  for (int i = 0; i < g->n; i++) {
    __atomic_add_fetch(&g->pending, 1, __ATOMIC_ACQ_REL);
    if (mpn_ucx_proxy_post(&g->cmds[i]) != ncclSuccess) { /* it never reached the proxy */
      __atomic_sub_fetch(&g->pending, 1, __ATOMIC_RELEASE);
      int ok = ncclSuccess; /* the communicator reports it */
      __atomic_compare_exchange_n(mpn_ucx_comm_error(g->comm), &ok, (int)ncclSystemError, 0, __ATOMIC_RELEASE,
                                  __ATOMIC_RELAXED);
    }
  }
  mpn_ucx_node_leave(&g->guard);
}

ncclResult_t mpn_ucx_gnode_enqueue(mpn_ucx_gnode_t* g, cudaStream_t s, const char* what) {
  return mpn_cuda_result(g->comm, cudaLaunchHostFunc(s, gnode_post, g), what);
}

/* What g holds besides itself; its mark is let go.  Where it frees a
 * stage (during a capture, at a launch): in relaxed mode. */
static void gnode_strip(mpn_ucx_gnode_t* g, int leak) {
  if (g->stage && !leak) {
    mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
    mpn_cuda_forget(cudaFreeHost(g->stage));
    mpn_cuda_relaxed_leave(mode);
  }
  g->stage = NULL;
  free(g->cmds);
  g->cmds = NULL;
  g->n = 0;
  mpn_ucx_gone_drop(g->gone);
  g->gone = NULL;
}

/* Whether g may go.  Its graphs are gone, so no replay runs its host node
 * again; it is marked dead all the same, which also waits for a node
 * running now, so every post of g is counted before pending is read (a
 * node entering later posts nothing).  Then the proxy must hold none of
 * its commands, and none may have failed: a put that UCX let go before a
 * failed fence, or a put released for a peer's size mismatch, may still
 * read the stage after its command completed or while it is in flight. */
static int gnode_done(mpn_ucx_gnode_t* g) {
  if (!mpn_ucx_gone_is(g->gone)) return 0;
  mpn_ucx_node_kill(&g->guard);
  return __atomic_load_n(&g->pending, __ATOMIC_ACQUIRE) == 0 && __atomic_load_n(&g->error, __ATOMIC_ACQUIRE) == 0;
}

void mpn_ucx_gnode_reclaim(mpn_ucx_gnode_t** list) {
  mpn_ucx_orphans_reap();
  for (mpn_ucx_gnode_t** at = list; *at;) {
    mpn_ucx_gnode_t* g = *at;
    if (!gnode_done(g)) {
      at = &g->next;
      continue;
    }
    *at = g->next;
    gnode_strip(g, 0);
    free(g); /* no host node of a graph gone runs again */
  }
}

void mpn_ucx_gnode_push(mpn_ucx_gnode_t** list, mpn_ucx_gnode_t* g) {
  mpn_ucx_gnode_reclaim(list);
  g->next = *list;
  *list = g;
}

int mpn_ucx_gnode_count(const mpn_ucx_gnode_t* list) {
  int n = 0;
  for (; list; list = list->next) n++;
  return n;
}

int mpn_ucx_gnode_list_idle(const mpn_ucx_gnode_t* list) {
  for (const mpn_ucx_gnode_t* g = list; g; g = g->next)
    if (__atomic_load_n(&g->pending, __ATOMIC_ACQUIRE) != 0 || __atomic_load_n(&g->error, __ATOMIC_ACQUIRE) != 0)
      return 0;
  return 1;
}

void mpn_ucx_gnode_kill_list(mpn_ucx_gnode_t* list) {
  for (mpn_ucx_gnode_t* g = list; g; g = g->next) mpn_ucx_node_kill(&g->guard);
}

/* A kept gnode whose graphs are gone (orphans.h). */
static void orphan_free(void* g) {
  gnode_strip(g, 0);
  free(g);
}

void mpn_ucx_gnode_free_list(mpn_ucx_gnode_t* list, int leak) {
  mpn_ucx_orphans_reap();
  for (mpn_ucx_gnode_t *g = list, *next; g; g = next) {
    next = g->next;
    mpn_ucx_node_kill(&g->guard);
    int awaited = mpn_ucx_gone_awaited(g->gone), gone = mpn_ucx_gone_is(g->gone);
    if (!leak && awaited && !gone && __atomic_load_n(&g->pending, __ATOMIC_ACQUIRE) == 0 &&
        __atomic_load_n(&g->error, __ATOMIC_ACQUIRE) == 0 && mpn_ucx_orphan_keep(g->gone, orphan_free, g))
      continue; /* whole, until its graphs are gone */
    /* The proxy closed the owner: a command still counted was left in
     * flight (it counts on the proxy's words now) and may read the stage. */
    gnode_strip(g, leak || __atomic_load_n(&g->pending, __ATOMIC_ACQUIRE) != 0);
    if (gone) free(g); /* else a replay of its graph may still read the mark */
  }
}
