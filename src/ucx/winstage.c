/*
 * winstage.c - one-sided operations with peers over UCX, whose UCX cannot
 * reach device memory.
 *
 * Each rank keeps, per window, a host mirror of its part (pinned, mapped
 * for the GPU, and mapped with ucp_mem_map for the peers), and per
 * communicator a signal area: a counter and a ring of MPN_APPLY_RING
 * descriptors per (source rank, context).  A put is staged like a send
 * (ucx/staged.c: the lane copies the source to a pinned slot) and the proxy
 * puts it into the peer's mirror at the same offset.  Its signal is the
 * descriptor {number, window, offset, bytes} put into the peer's ring, then
 * an atomic add on the peer's counter, each fenced after what came before
 * (cuda/apply.h).  The peer's ncclWaitSignal waits (stream memory wait) for
 * the counter, then a kernel copies each signalled put from the mirror into
 * the window: when the wait is over on the stream, the data is on the
 * device.  A signal alone carries a descriptor of no bytes.  More than
 * MPN_APPLY_RING signals outstanding between two ranks on one context
 * overwrite descriptors: the kernel notices and the communicator reports
 * ncclInvalidUsage.
 */
#include "ucx/winstage.h"
#include "ucx/gnodes.h"
#include "ucx/gslots.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/bootstrap.h"
#include "core/clock.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/param.h"
#include "core/error.h"
#include "cuda/apply.h"
#include "cuda/device.h"
#include "rma/rma.h"
#include "rma/window.h"
#include "ucx/net_comm.h"
#include "ucx/proxy.h"
#include "ucx/rma.h"
#include "ucx/staged.h"
#include "cuda/memop.h"
#include "p2p/pair.h"

struct mpn_ucx_win {
  int slot;                    /* in the kernel's window table */
  char* mirror;                /* pinned, mapped */
  size_t bytes;
  mpn_ucx_region_t* region;
  struct mpn_ucx_win* next;    /* retired windows */
};

struct mpn_ucx_rma {
  int nctx;
  char* area;                  /* pinned, mapped: counters, rings, graph slots, then the error word */
  CUdeviceptr darea;
  size_t rings_at, gsig_at, gdesc_at, gfree_at, error_at, bytes;
  mpn_ucx_gslots_t* gslots;    /* which graph slots this side may give out again */
  mpn_ucx_region_t* region;
  mpn_apply_win_t* wins;       /* pinned, mapped: the kernel's window table */
  CUdeviceptr dwins;
  mpn_ucx_win_t* slots[MPN_APPLY_WINDOWS];
  mpn_ucx_win_t* retired;
  int reported; /* atomic: the error word was reported (mpn_ucx_rma_poll_errors) */
};

static void state_free(struct mpn_ucx_rma* r, int leak) {
  if (r->region && leak) mpn_ucx_region_forget_keys(r->region);
  if (r->region) mpn_ucx_region_free(r->region);
  if (r->area && !leak) mpn_cuda_forget(cudaFreeHost(r->area));
  if (r->wins && !leak) mpn_cuda_forget(cudaFreeHost(r->wins));
  mpn_ucx_gslots_destroy(r->gslots); /* (process memory: leaked or not, records may still name it) */
  free(r);
}

/* Collective: the communicator's signal area and window table. */
static ncclResult_t state_make(struct ncclComm* comm) {
  struct mpn_ucx_rma* r = calloc(1, sizeof(*r));
  if (r == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  r->nctx = comm->config.num_rma_ctx;
  size_t pairs = (size_t)comm->nranks * (size_t)r->nctx;
  size_t slots = (size_t)comm->nranks * MPN_UCX_GRAPH_SLOTS;
  r->rings_at = pairs * sizeof(uint64_t);
  r->gsig_at = r->rings_at + pairs * MPN_APPLY_RING * sizeof(mpn_apply_desc_t);
  r->gdesc_at = r->gsig_at + slots * sizeof(uint64_t);
  r->gfree_at = r->gdesc_at + slots * sizeof(mpn_apply_desc_t);
  r->error_at = r->gfree_at + slots * sizeof(uint64_t);
  r->bytes = r->error_at + 64;
  r->gslots = mpn_ucx_gslots_create(slots);
  cudaError_t err = r->gslots ? mpn_cuda_host_mapped(r->bytes, (void**)&r->area, &r->darea) : cudaErrorMemoryAllocation;
  for (size_t i = 0; err == cudaSuccess && i < slots; i++) /* every graph slot starts free */
    ((uint64_t*)(r->area + r->gfree_at))[i] = 1;
  if (err == cudaSuccess) err = mpn_cuda_host_mapped(MPN_APPLY_WINDOWS * sizeof(mpn_apply_win_t), (void**)&r->wins, &r->dwins);
  ncclResult_t mine = ncclSuccess;
  if (err != cudaSuccess) /* (without graph slots CUDA recorded nothing, to forget) */
    mine = r->gslots ? mpn_cuda_result(comm, err, "allocating the UCX signal area")
                     : mpn_error_set(comm, ncclSystemError, "out of memory");
  /* Every rank joins the exchange; one that failed maps nothing and all fail. */
  ncclResult_t res = mpn_ucx_region_register(comm, mine == ncclSuccess ? r->area : NULL, r->bytes, &r->region);
  if (mine != ncclSuccess) res = mine;
  if (res != ncclSuccess) {
    state_free(r, 0);
    return res;
  }
  __atomic_store_n(&comm->ucx_rma, r, __ATOMIC_RELEASE); /* the watchdog may read it */
  return ncclSuccess;
}

int mpn_ucx_rma_ready(const struct ncclComm* comm) { return comm->ucx_rma != NULL; }

ncclResult_t mpn_ucx_win_register(struct ncclComm* comm, void* base, size_t bytes, mpn_ucx_win_t** out) {
  *out = NULL;
  if (comm->ucx_rma == NULL) MPN_CHECK(state_make(comm));
  struct mpn_ucx_rma* r = comm->ucx_rma;
  mpn_ucx_win_t* w = calloc(1, sizeof(*w));
  CUdeviceptr dmirror = 0;
  ncclResult_t mine = w ? ncclSuccess : mpn_error_set(comm, ncclSystemError, "out of memory");
  int slot = 0; /* every rank has the same windows: the same free slot */
  while (slot < MPN_APPLY_WINDOWS && r->slots[slot]) slot++;
  if (mine == ncclSuccess && slot == MPN_APPLY_WINDOWS)
    mine = mpn_error_set(comm, ncclInvalidUsage,
                         "ncclCommWindowRegister: more than %d windows at once with peers over UCX",
                         MPN_APPLY_WINDOWS);
  if (mine == ncclSuccess) {
    cudaError_t err = mpn_cuda_host_mapped(bytes, (void**)&w->mirror, &dmirror);
    if (err != cudaSuccess) mine = mpn_cuda_result(comm, err, "allocating a window's host mirror for UCX peers");
  }
  mpn_ucx_region_t* region = NULL;
  ncclResult_t res = mpn_ucx_region_register(comm, mine == ncclSuccess ? w->mirror : NULL, bytes, &region);
  if (mine != ncclSuccess) res = mine;
  if (res != ncclSuccess) {
    if (region) mpn_ucx_region_free(region);
    if (w && w->mirror) mpn_cuda_forget(cudaFreeHost(w->mirror));
    free(w);
    return res;
  }
  *w = (mpn_ucx_win_t){.slot = slot, .mirror = w->mirror, .bytes = bytes, .region = region};
  r->wins[slot] = (mpn_apply_win_t){(uint64_t)dmirror, (uint64_t)(uintptr_t)base, bytes};
  r->slots[slot] = w;
  *out = w;
  return ncclSuccess;
}

/* leak: a peer may still put into the mirror (the communicator failed or
 * was aborted); it is unmapped, not freed. */
static void win_free(mpn_ucx_win_t* w, int leak) {
  if (w->region && leak) mpn_ucx_region_forget_keys(w->region);
  if (w->region) mpn_ucx_region_free(w->region);
  if (w->mirror && !leak) mpn_cuda_forget(cudaFreeHost(w->mirror));
  free(w);
}

static void slot_release(struct ncclComm* comm, mpn_ucx_win_t* w) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  r->slots[w->slot] = NULL;
  r->wins[w->slot] = (mpn_apply_win_t){0, 0, 0};
}

ncclResult_t mpn_ucx_win_deregister(struct ncclComm* comm, mpn_ucx_win_t* w) {
  /* Puts into the peers' mirrors still in flight name their keys: when they
   * did not all finish, the window goes with the communicator instead. */
  ncclResult_t drained = mpn_ucx_staged_drain(comm);
  ncclResult_t res = mpn_bootstrap_barrier(comm->bootstrap); /* every rank, either way */
  if (drained != ncclSuccess) {
    mpn_ucx_win_retire(comm, w);
    return drained;
  }
  slot_release(comm, w);
  win_free(w, 0);
  return res;
}

void mpn_ucx_win_retire(struct ncclComm* comm, mpn_ucx_win_t* w) {
  slot_release(comm, w);
  w->next = comm->ucx_rma->retired;
  comm->ucx_rma->retired = w;
}

/* Releases the captured waits of peer's slots: B's on the "gsig" words
 * peer's puts raise, and this rank's own puts' waits on "gfree" for them. */
static void release_graph_slots(struct mpn_ucx_rma* r, int peer) {
  uint64_t* gsig = (uint64_t*)(r->area + r->gsig_at) + (size_t)peer * MPN_UCX_GRAPH_SLOTS;
  uint64_t* gfree = (uint64_t*)(r->area + r->gfree_at) + (size_t)peer * MPN_UCX_GRAPH_SLOTS;
  for (size_t i = 0; i < MPN_UCX_GRAPH_SLOTS; i++) {
    __atomic_store_n(&gsig[i], UINT64_MAX >> 1, __ATOMIC_RELEASE);
    __atomic_store_n(&gfree[i], UINT64_MAX >> 1, __ATOMIC_RELEASE);
  }
}

void mpn_ucx_rma_release(struct ncclComm* comm) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  for (size_t i = 0; r && i < r->rings_at / sizeof(uint64_t); i++)
    __atomic_store_n((uint64_t*)r->area + i, UINT64_MAX >> 1, __ATOMIC_RELEASE);
  for (int peer = 0; r && peer < comm->nranks; peer++) release_graph_slots(r, peer);
}

void mpn_ucx_rma_free(struct ncclComm* comm, int leak) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  if (r == NULL) return;
  if (leak) mpn_ucx_rma_release(comm);
  for (mpn_ucx_win_t *w = r->retired, *next; w; w = next) {
    next = w->next;
    win_free(w, leak);
  }
  for (int i = 0; i < MPN_APPLY_WINDOWS; i++)
    if (r->slots[i]) win_free(r->slots[i], leak);
  state_free(r, leak);
  comm->ucx_rma = NULL;
}

/* Whether every graph slot of this rank is free again or let go: no peer
 * still owes the acknowledgement of a replayed captured signal. */
static int acks_in(const struct mpn_ucx_rma* r, int nranks) {
  const uint64_t* gfree = (const uint64_t*)(r->area + r->gfree_at);
  for (size_t i = 0; i < (size_t)nranks * MPN_UCX_GRAPH_SLOTS; i++)
    if (__atomic_load_n(&gfree[i], __ATOMIC_ACQUIRE) == 0) return 0;
  return 1;
}

int mpn_ucx_rma_quiesce(struct ncclComm* comm) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  if (r == NULL) return 1;
  uint64_t start = mpn_clock_now_ns(), net = (uint64_t)mpn_param_int(MPN_PARAM_NET_TIMEOUT) * 1000000000ull;
  int idle = 0, acked = 0;
  for (;;) {
    if (comm->ucx && __atomic_load_n(mpn_ucx_comm_error(comm), __ATOMIC_ACQUIRE) != ncclSuccess) return 0;
    uint64_t waited = mpn_clock_now_ns() - start;
    idle = idle || mpn_ucx_gnode_list_idle(comm->ucx_rma_graphs);
    acked = acked || acks_in(r, comm->nranks);
    if (idle && acked) return 1;
    if ((!idle && waited > net) || (!acked && waited > MPN_UCX_ACK_WAIT_MS * 1000000ull)) break;
    usleep(50);
  }
  MPN_INFO(MPN_SUBSYS_RMA, "rank %d: %s; its one-sided state over UCX is left, not freed", comm->rank,
           idle ? "a peer did not take this rank's last captured signal" : "captured puts over UCX did not end");
  return 0;
}

/* A replay's host node may still be queued: each node is marked dead
 * (its host node checks), the one running is waited for, and the nodes of
 * graphs not yet gone stay (leaked) for late host nodes to read the mark.
 * The list is the communicator's, not the one-sided state's, so that this
 * finds it before that state goes (and whether it went yet or not). */
void mpn_ucx_rma_kill_graphs(struct ncclComm* comm) { mpn_ucx_gnode_kill_list(comm->ucx_rma_graphs); }

void mpn_ucx_rma_free_graphs(struct ncclComm* comm, int leak) {
  mpn_ucx_gnode_free_list(comm->ucx_rma_graphs, leak);
  comm->ucx_rma_graphs = NULL;
}

int mpn_ucx_rma_graph_nodes(const struct ncclComm* comm) {
  const struct mpn_ucx_rma* r = comm->ucx_rma;
  return r ? mpn_ucx_gnode_count(comm->ucx_rma_graphs) : 0;
}

/* The descriptor's "lost" word, as mpn_ucx_cmd_t's desc_lost names it. */
static unsigned desc_lost_word(void) { return 1 + (unsigned)(offsetof(mpn_apply_desc_t, lost) / sizeof(uint32_t)); }

ncclResult_t mpn_ucx_rma_post(const mpn_op_t* op, void* buf, size_t off, size_t len, int last,
                              const mpn_ucx_trigger_t* when, uint64_t* flag, uint64_t value,
                              int* error, uint64_t* release, int nrelease) {
  struct ncclComm* comm = op->comm;
  struct mpn_ucx_rma* r = comm->ucx_rma;
  mpn_ucx_cmd_t cmd = {.kind = MPN_UCX_PUT_SIGNAL,
                       .owner = comm->ucx,
                       .peer = mpn_ucx_comm_peer(comm, op->peer),
                       .buf = buf,
                       .bytes = len,
                       .flag = flag,
                       .value = value,
                       .error = error,
                       .owner_error = mpn_ucx_comm_error(comm),
                       .failure = mpn_ucx_comm_failure(comm),
                       .from = op->peer,
                       .trigger = when ? when->word : NULL,
                       .trigger_value = when ? when->value : 0,
                       .release = release,
                       .nrelease = nrelease,
                       .user_buffer = when ? when->user_buffer : 0};
  const mpn_ucx_win_t* w = op->kind == MPN_OP_PUT_SIGNAL && op->bytes ? op->win->ucx : NULL;
  if (len > 0) {
    cmd.dst = mpn_ucx_region_remote(w->region, op->peer);
    cmd.dst_offset = op->offset + off;
  }
  if (last) { /* into the peer's area: this rank's counter and ring on ctx */
    size_t pair = (size_t)comm->rank * (size_t)r->nctx + (size_t)op->ctx;
    mpn_apply_desc_t d = {.count = op->seq, .slot = w ? (uint32_t)w->slot : MPN_APPLY_NO_WINDOW,
                          .offset = op->offset, .bytes = w ? op->bytes : 0};
    cmd.signal = cmd.desc = mpn_ucx_region_remote(r->region, op->peer);
    cmd.desc_lost = desc_lost_word();
    cmd.signal_offset = pair * sizeof(uint64_t);
    cmd.desc_offset = r->rings_at + (pair * MPN_APPLY_RING + (op->seq - 1) % MPN_APPLY_RING) * sizeof(d);
    memcpy(cmd.desc_bytes, &d, sizeof(d));
  }
  return mpn_ucx_proxy_post(&cmd);
}

void mpn_ucx_rma_release_peer(struct ncclComm* comm, int peer) {
  struct mpn_ucx_rma* r = __atomic_load_n(&comm->ucx_rma, __ATOMIC_ACQUIRE);
  for (int ctx = 0; r && ctx < r->nctx; ctx++)
    __atomic_store_n((uint64_t*)r->area + (size_t)peer * (size_t)r->nctx + (size_t)ctx, UINT64_MAX >> 1,
                     __ATOMIC_RELEASE);
  if (r) release_graph_slots(r, peer);
}

int mpn_ucx_rma_waiting_for(struct ncclComm* comm, int peer) {
  struct mpn_ucx_rma* r = __atomic_load_n(&comm->ucx_rma, __ATOMIC_ACQUIRE);
  struct mpn_rma* rma = __atomic_load_n(&comm->rma, __ATOMIC_ACQUIRE);
  for (int ctx = 0; r && rma && rma->expected && ctx < r->nctx; ctx++) {
    uint64_t came =
        __atomic_load_n((uint64_t*)r->area + (size_t)peer * (size_t)r->nctx + (size_t)ctx, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&rma->expected[mpn_rma_pc(comm, peer, ctx)], __ATOMIC_RELAXED) > came) return 1;
  }
  return 0;
}

int mpn_ucx_rma_captured_with(struct ncclComm* comm, int peer) {
  const struct mpn_rma* rma = __atomic_load_n(&comm->rma, __ATOMIC_ACQUIRE);
  for (int ctx = 0; rma && rma->graph_sent && ctx < comm->config.num_rma_ctx; ctx++) {
    size_t pc = mpn_rma_pc(comm, peer, ctx);
    if (__atomic_load_n(&rma->graph_sent[pc], __ATOMIC_RELAXED) ||
        __atomic_load_n(&rma->graph_expected[pc], __ATOMIC_RELAXED))
      return 1;
  }
  return 0;
}

CUdeviceptr mpn_ucx_rma_counter(struct ncclComm* comm, int peer, int ctx) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  return r->darea + ((CUdeviceptr)peer * (CUdeviceptr)r->nctx + (CUdeviceptr)ctx) * sizeof(uint64_t);
}

/* Ranges of the landing kernel, launched MPN_APPLY_RANGES at a time. */
typedef struct {
  mpn_apply_range_t r[MPN_APPLY_RANGES];
  int k;
} ranges_t;

static ncclResult_t ranges_flush(struct ncclComm* comm, ranges_t* b, cudaStream_t stream) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  cudaError_t err = b->k ? mpn_apply_launch((uint64_t)r->dwins, b->r, b->k, (uint64_t)(r->darea + r->error_at), stream)
                         : cudaSuccess;
  b->k = 0;
  return mpn_cuda_result(comm, err, "launching the kernel that lands puts over UCX");
}

static ncclResult_t ranges_add(struct ncclComm* comm, ranges_t* b, mpn_apply_range_t range, cudaStream_t stream) {
  if (b->k == MPN_APPLY_RANGES) MPN_CHECK(ranges_flush(comm, b, stream));
  b->r[b->k++] = range;
  return ncclSuccess;
}

ncclResult_t mpn_ucx_rma_apply(struct ncclComm* comm, const int* peer, const int* ctx,
                               const uint64_t* expected, const int* n, int count, cudaStream_t stream) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  ranges_t b = {.k = 0};
  for (int i = 0; i < count; i++) {
    if (n[i] <= 0) continue;
    size_t pair = (size_t)peer[i] * (size_t)r->nctx + (size_t)ctx[i];
    MPN_CHECK(ranges_add(comm, &b,
                         (mpn_apply_range_t){
                             .ring = (uint64_t)(r->darea + r->rings_at + pair * MPN_APPLY_RING * sizeof(mpn_apply_desc_t)),
                             .first = expected[i] - (uint64_t)n[i] + 1, .n = (uint32_t)n[i]},
                         stream));
  }
  return ranges_flush(comm, &b, stream);
}

void mpn_ucx_rma_poll_errors(struct ncclComm* comm) {
  /* (made by the first window registration, which another thread may run) */
  struct mpn_ucx_rma* r = __atomic_load_n(&comm->ucx_rma, __ATOMIC_ACQUIRE);
  int word = r ? __atomic_load_n((int*)(r->area + r->error_at), __ATOMIC_ACQUIRE) : 0;
  /* Once, whichever thread polls first (ncclCommGetAsyncError may be
   * called from several at once). */
  if (word == 0 || __atomic_exchange_n(&r->reported, 1, __ATOMIC_ACQ_REL)) return;
  /* Waits let go for a peer found gone land nothing and set the word too:
   * the communicator keeps the error that explains it, the first. */
  if (word == MPN_APPLY_LOST)
    mpn_comm_fail_async(comm, ncclRemoteError,
                        "a one-sided put from a peer over UCX failed on its way (the peer's communicator says why): "
                        "its signal came, its data is not in the window");
  else
    mpn_comm_fail_async(comm, ncclInvalidUsage,
                        "a one-sided put over UCX was lost: more than %d signals between two ranks on one "
                        "context were outstanding (signalled, not yet waited for)",
                        MPN_APPLY_RING);
}

/* ---- one-sided calls captured in CUDA graphs ----
 *
 * Running counts cannot be captured, so each captured signal from A to B
 * has a slot of its own (the n-th captured signal on a context matching
 * the n-th captured wait count, as within a host): B's "gsig" word, B's
 * descriptor, and A's "gfree" word, which starts at 1.  A replay on A waits
 * for gfree, stages the put, and a host node zeroes gfree and posts the
 * put, fence, descriptor, fence, add of 1 to gsig.  On B the captured wait
 * waits for gsig, lands the put (the kernel, descriptor by slot), zeroes
 * gsig and a host node puts 1 into A's gfree: the slot is A's again.  Host
 * nodes make no CUDA call and never wait.  The descriptor carries the
 * signal's number, which B's kernel checks against the wait's.
 *
 * A context's slots serve its signals in turn (rma.c, graph_slot), each
 * again once the graphs holding its previous signal are gone on this side
 * (gslots.c, told by the records hung on the graphs: p2p/graphs.h) and, on
 * A, once B took that signal's last replay (gfree back to 1): what this
 * side can know without a message (ncclGroupEnd's checks wait for it:
 * rma/check.c).  B's graphs are not known to A: B must destroy the old
 * graph before replaying its new one, as within a host.
 *
 * What a host node needs (its commands, A's staging) is a gnode
 * (ucx/gnodes.c), hung on the same records: it goes at a later captured
 * launch once its graphs are gone and the proxy is done with its commands. */

/* Hands g to comm, which frees it once its graphs are gone and the proxy
 * is done with it (earlier ones at this call), or with itself; g's graph
 * is the one stream s captures. */
void mpn_ucx_rma_graph_keep(struct ncclComm* comm, mpn_ucx_gnode_t* g) { mpn_ucx_gnode_push(&comm->ucx_rma_graphs, g); }

static void gnode_keep(struct ncclComm* comm, mpn_graph_holds_t** holds, cudaStream_t s, mpn_ucx_gnode_t* g) {
  mpn_ucx_rma_graph_keep(comm, g);
  mpn_ucx_gnode_watch(g, holds, s, comm->cuda_dev);
}

static size_t per_ctx(const struct mpn_ucx_rma* r) { return MPN_UCX_GRAPH_SLOTS / (size_t)r->nctx; }

/* Index of peer's slot in the words of gslots, gsig and gfree. */
static size_t gslot_index(int peer, int slot) { return (size_t)peer * MPN_UCX_GRAPH_SLOTS + (size_t)slot; }

int mpn_ucx_rma_graph_slot_state(struct ncclComm* comm, int peer, int slot, uint64_t prev, int send,
                                 unsigned long long capture) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  size_t i = gslot_index(peer, slot);
  int state = mpn_ucx_gslots_state(r->gslots, (uint32_t)i, prev, send ? MPN_SIDE_SEND : MPN_SIDE_RECV, capture);
  if (state != MPN_UCX_GSLOT_FREE || !send) return state;
  const uint64_t* gfree = (const uint64_t*)(r->area + r->gfree_at) + i; /* the peer took the last replay */
  return __atomic_load_n(gfree, __ATOMIC_ACQUIRE) >= 1 ? MPN_UCX_GSLOT_FREE : MPN_UCX_GSLOT_HELD;
}

void mpn_ucx_rma_graph_take(struct ncclComm* comm, mpn_graph_holds_t** holds, cudaStream_t s, int peer, int slot,
                            uint64_t seq, int send, unsigned long long capture) {
  mpn_ucx_gslots_take(comm->ucx_rma->gslots, holds, s, comm->cuda_dev, (uint32_t)gslot_index(peer, slot), seq,
                      send ? MPN_SIDE_SEND : MPN_SIDE_RECV, capture);
}

ncclResult_t mpn_ucx_rma_graph_signal(const mpn_driver_t* drv, mpn_graph_holds_t** holds, mpn_op_t* op, int slot,
                                      uint64_t seq) {
  struct ncclComm* comm = op->comm;
  struct mpn_ucx_rma* r = comm->ucx_rma;
  size_t bytes = op->kind == MPN_OP_PUT_SIGNAL ? op->bytes : 0, me = (size_t)comm->rank;
  mpn_ucx_gnode_t* g = NULL;
  MPN_CHECK(mpn_ucx_gnode_create(comm, 1, bytes, &g));
  const mpn_ucx_win_t* w = bytes ? op->win->ucx : NULL;
  mpn_apply_desc_t d = {
      .count = seq, .slot = w ? (uint32_t)w->slot : MPN_APPLY_NO_WINDOW, .offset = op->offset, .bytes = bytes};
  mpn_ucx_remote_t* area = mpn_ucx_region_remote(r->region, op->peer);
  mpn_ucx_cmd_t* c = &g->cmds[0];
  *c = mpn_ucx_gnode_cmd(g, op->peer);
  c->buf = g->stage;
  c->bytes = bytes;
  c->dst = w ? mpn_ucx_region_remote(w->region, op->peer) : NULL;
  c->dst_offset = op->offset;
  c->signal = c->desc = area;
  c->desc_lost = desc_lost_word();
  c->signal_offset = r->gsig_at + gslot_index((int)me, slot) * 8;
  c->desc_offset = r->gdesc_at + gslot_index((int)me, slot) * sizeof(d);
  memcpy(c->desc_bytes, &d, sizeof(d));
  size_t free_at = r->gfree_at + gslot_index(op->peer, slot) * 8;
  g->zero = (uint64_t*)(r->area + free_at);
  gnode_keep(comm, holds, op->stream, g); /* freed once its graph is gone, whatever happens below */
  ncclResult_t first = ncclSuccess;
  mpn_memops_t b; /* the slot is ours again once the peer landed its last replay */
  mpn_memops_init(&b, drv, op->stream);
  mpn_keep(&first, mpn_memops_add(&b, r->darea + free_at, 1, MPN_MEMOP_WAIT_GEQ));
  mpn_keep(&first, mpn_memops_flush(&b));
  if (bytes)
    mpn_keep(&first, mpn_cuda_result(comm, cudaMemcpyAsync(g->stage, op->buf, bytes, cudaMemcpyDeviceToHost, op->stream),
                                     "staging a captured put"));
  mpn_keep(&first, mpn_ucx_gnode_enqueue(g, op->stream, "capturing a UCX put"));
  return first;
}

CUdeviceptr mpn_ucx_rma_graph_flag(struct ncclComm* comm, int peer, int slot) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  return r->darea + r->gsig_at + (CUdeviceptr)gslot_index(peer, slot) * 8;
}

ncclResult_t mpn_ucx_rma_graph_land(const mpn_driver_t* drv, mpn_graph_holds_t** holds, struct ncclComm* comm,
                                    const int* peer, const int* ctx, const uint64_t* first_k, const int* n, int count,
                                    cudaStream_t stream) {
  struct mpn_ucx_rma* r = comm->ucx_rma;
  static uint64_t one = 1; /* what the host node puts into the peers' gfree words */
  int total = 0;
  for (int i = 0; i < count; i++) total += n[i];
  if (total == 0) return ncclSuccess;
  mpn_ucx_gnode_t* g = NULL;
  MPN_CHECK(mpn_ucx_gnode_create(comm, total, 0, &g));
  gnode_keep(comm, holds, stream, g);
  ncclResult_t first = ncclSuccess;
  ranges_t rb = {.k = 0};
  for (int i = 0; i < count; i++) { /* the puts, from the descriptors of their slots */
    if (n[i] <= 0) continue;
    size_t base = (size_t)peer[i] * MPN_UCX_GRAPH_SLOTS + (size_t)ctx[i] * per_ctx(r);
    mpn_keep(&first, ranges_add(comm, &rb,
                                (mpn_apply_range_t){
                                    .ring = (uint64_t)(r->darea + r->gdesc_at + base * sizeof(mpn_apply_desc_t)),
                                    .first = first_k[i] + 1, .n = (uint32_t)n[i], .len = (uint32_t)per_ctx(r)},
                                stream));
  }
  mpn_keep(&first, ranges_flush(comm, &rb, stream));
  mpn_memops_t b; /* the slots are empty again, then their senders hear of it */
  mpn_memops_init(&b, drv, stream);
  for (int i = 0, c = 0; i < count; i++)
    for (int j = 0; j < n[i]; j++, c++) {
      /* The context's slots in turn: count first_k + j + 1 is in entry (first_k + j) % per_ctx. */
      size_t slot = (size_t)ctx[i] * per_ctx(r) + ((size_t)first_k[i] + (size_t)j) % per_ctx(r);
      mpn_keep(&first, mpn_memops_add(&b, mpn_ucx_rma_graph_flag(comm, peer[i], (int)slot), 0, MPN_MEMOP_WRITE));
      mpn_ucx_cmd_t* put = &g->cmds[c];
      *put = mpn_ucx_gnode_cmd(g, peer[i]);
      put->buf = &one;
      put->bytes = 8;
      put->dst = mpn_ucx_region_remote(r->region, peer[i]);
      put->dst_offset = r->gfree_at + gslot_index(comm->rank, (int)slot) * 8;
    }
  mpn_keep(&first, mpn_memops_flush(&b));
  mpn_keep(&first, mpn_ucx_gnode_enqueue(g, stream, "capturing the release of UCX signal slots"));
  return first;
}
