/*
 * staged.c - ncclSend/ncclRecv of device memory with peers over UCX, through
 * pinned host buffers (UCX here has no CUDA support).
 *
 * Each (peer, direction) is a lane: a CUDA stream of its own,
 * MPINCCL_UCX_DEPTH slots of MPINCCL_UCX_CHUNK bytes of pinned host memory,
 * and per slot two host words mapped for the GPU, "ready" (written by the
 * lane's stream) and "done" (written by the proxy).  Messages are cut into
 * chunks; the n-th chunk of a lane uses slot n % depth and both words carry
 * n + 1:
 *   send: the lane waits until the slot's previous chunk was sent ("done" >=
 *         n + 1 - depth), copies the chunk device-to-host, writes "ready" =
 *         n + 1; the proxy, armed on that word, sends the chunk and writes
 *         "done" = n + 1 when UCX has it.
 *   recv: the proxy, armed on "ready" >= n + 1 - depth (the lane copied the
 *         slot's previous chunk out), posts the receive and writes "done" =
 *         n + 1 when the data is there; the lane waits for it, copies the
 *         chunk host-to-device and writes "ready" = n + 1.
 * So the copies of one chunk overlap the transfer of the next ones, and the
 * API thread only arms operations and enqueues stream work: it never waits.
 * A failure while issuing a chunk fails the communicator (lane_fail).
 *
 * A group forks every lane it uses from the caller's stream (an event
 * recorded before any of the group's other work is enqueued), enqueues the
 * lanes' chunks next, and joins them back after its work within the host.
 * A lane is then a pipeline that depends only on the peer's matching lane:
 * messages of one group never wait for each other, whatever the peer's
 * grouping, and work within the host in the same group neither waits for
 * them nor they for it.  The lanes' work is enqueued before the caller's
 * stream gets its waits for peers: streams beyond CUDA_DEVICE_MAX_CONNECTIONS
 * share hardware queues, and a lane behind such a wait in a shared queue
 * would hold back the signal or data the peer waits for (test_rma's barrier
 * hung that way at 4 processes over UCX).  Messages of a lane are
 * numbered in program order, the n-th send matching the peer's n-th
 * receive; chunks are matched by tag (destination, message, chunk), and both
 * sides must cut them alike (the same MPINCCL_UCX_CHUNK).  Each side cuts a
 * message from its own size, and a chunk's tag says whether it is the
 * message's last: a send and a receive of different sizes meet a chunk of
 * another size or another last bit, which fails both communicators with
 * ncclInvalidUsage and releases the lanes' waits (ucx/notices.c, proxy.c, reports.c).  The armed
 * operations are host work a replay would not repeat: messages captured in
 * CUDA graphs take another way (graph.c).
 */
#include "ucx/staged.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/device.h"
#include "cuda/driver.h"
#include "cuda/memop.h"
#include "transport.h"
#include "cuda/event.h"
#include "ucx/net.h"
#include "ucx/net_comm.h"
#include "ucx/proxy.h"
#include "ucx/ucx_probe.h"
#include "ucx/graph.h"
#include "ucx/winstage.h"

/* A message is cut into at most MPINCCL_UCX_CHUNKS chunks, each MPINCCL_UCX_CHUNK
 * times a power of two up to 2^MAX_GROWTH: a lane's stream holds three
 * operations per chunk, and a long stream queue blocks the thread that
 * enqueues (a lane of 1 GiB in 1 MiB chunks did, and its peer, blocked
 * the same way before posting its receives, deadlocked with it).  The
 * slots grow to the largest cut a lane has met; both sides cut a message
 * alike from its size. */
enum { MAX_GROWTH = 6 };

typedef struct {
  char* buf;          /* depth * size bytes, pinned */
  char* retired[MAX_GROWTH]; /* smaller buffers earlier chunks may still use */
  int nretired;
  size_t size;        /* bytes of a slot */
  uint64_t* words;    /* pinned, mapped: [slot] "ready", [depth + slot] "done", [2 * depth] "go" */
  CUdeviceptr dwords; /* the words as the GPU sees them */
  cudaStream_t stream;
  cudaEvent_t joined; /* recorded on stream where a group's work on the lane ends */
  int dev;
  size_t chunk;
  int depth;
  uint64_t chunks;    /* chunks enqueued so far */
  uint64_t messages;  /* messages enqueued so far (tags) */
  int error;          /* an ncclResult_t, set by the proxy */
  int forked;         /* the launch under way made the lane wait for its fork */
} lane_t;

struct mpn_ucx_staged {
  lane_t* lanes; /* 2 * nranks: [2 * peer] sends to peer, [2 * peer + 1] receives */
  uint64_t* gcount;          /* 2 * nranks: messages captured in graphs, as lanes */
  mpn_ucx_ggroup_t* graphs;  /* captured groups (graph.c), freed once their graph is gone or with the communicator */
  int clean;     /* destroy found every lane done (mpn_ucx_staged_quiesce) */
};

static void lane_free(lane_t* l) {
  if (l->stream) mpn_cuda_forget(cudaStreamDestroy(l->stream));
  if (l->joined) mpn_cuda_forget(cudaEventDestroy(l->joined));
  if (l->buf) mpn_cuda_forget(cudaFreeHost(l->buf));
  for (int i = 0; i < l->nretired; i++)
    if (l->retired[i]) mpn_cuda_forget(cudaFreeHost(l->retired[i]));
  if (l->words) mpn_cuda_forget(cudaFreeHost(l->words));
  memset(l, 0, sizeof(*l));
}

/* The lane of comm with peer (recv: receives from it), made on first use:
 * its stream on comm's device, buffers and words. */
static ncclResult_t staged_get(struct ncclComm* comm) {
  if (comm->staged != NULL) return ncclSuccess;
  struct mpn_ucx_staged* st = calloc(1, sizeof(*st));
  lane_t* lanes = calloc(2 * (size_t)comm->nranks, sizeof(*lanes));
  uint64_t* gcount = calloc(2 * (size_t)comm->nranks, sizeof(*gcount));
  if (st == NULL || lanes == NULL || gcount == NULL) {
    free(st), free(lanes), free(gcount);
    return mpn_error_set(comm, ncclSystemError, "out of memory");
  }
  st->lanes = lanes;
  st->gcount = gcount;
  comm->staged = st;
  return ncclSuccess;
}

uint64_t mpn_ucx_graph_count(struct ncclComm* comm, int peer, int send) {
  return comm->staged->gcount[2 * peer + !send]++; /* made by mpn_ucx_staged_check */
}

void mpn_ucx_graph_keep(struct ncclComm* comm, mpn_ucx_ggroup_t* g) {
  mpn_ucx_graph_reclaim(&comm->staged->graphs); /* those whose graphs are gone */
  mpn_ucx_graph_push(&comm->staged->graphs, g);
}

int mpn_ucx_graph_groups(const struct ncclComm* comm) {
  return comm->staged ? mpn_ucx_graph_live(comm->staged->graphs) : 0;
}

static ncclResult_t lane_get(struct ncclComm* comm, int peer, int recv, lane_t** out) {
  MPN_CHECK(staged_get(comm));
  lane_t* l = &comm->staged->lanes[2 * peer + recv];
  *out = l;
  if (l->buf != NULL) return ncclSuccess;
  l->chunk = (size_t)mpn_param_int(MPN_PARAM_UCX_CHUNK);
  l->depth = (int)mpn_param_int(MPN_PARAM_UCX_DEPTH);
  l->dev = comm->cuda_dev;
  size_t words = (2 * (size_t)l->depth + 1) * sizeof(uint64_t);
  /* Made by ncclGroupEnd's checks, on the caller's thread: its current
   * device is given back, as NCCL's ncclGroupEnd leaves it. */
  int saved = mpn_cuda_device_enter(-1);
  cudaError_t err = cudaSetDevice(comm->cuda_dev);
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&l->joined, cudaEventDisableTiming);
  if (err == cudaSuccess)
    err = cudaHostAlloc((void**)&l->buf, (size_t)l->depth * l->chunk, cudaHostAllocPortable);
  l->size = l->chunk;
  if (err == cudaSuccess) err = mpn_cuda_host_mapped(words, (void**)&l->words, &l->dwords);
  mpn_cuda_device_leave(saved);
  if (err != cudaSuccess) {
    mpn_cuda_forget(err);
    ncclResult_t res = mpn_error_set(comm, ncclUnhandledCudaError,
                                     "staging for rank %d over UCX (a stream, %d x %zu bytes: "
                                     "MPINCCL_UCX_DEPTH x MPINCCL_UCX_CHUNK): %s",
                                     peer, l->depth, l->chunk, cudaGetErrorString(err));
    lane_free(l);
    return res;
  }
  return ncclSuccess;
}

static int is_put(const mpn_op_t* op) {
  return op->kind == MPN_OP_PUT_SIGNAL || op->kind == MPN_OP_SIGNAL;
}

/* The lane of op, or NULL for one captured in a graph (graph.c) or one
 * whose lane could not be made (mpn_ucx_staged_check refused it).  A
 * message or put of no bytes has one too: a chunk of no bytes carries it. */
static lane_t* op_lane(mpn_op_t* op) {
  lane_t* l = NULL;
  if (op->capturing || lane_get(op->comm, op->peer, op->kind == MPN_OP_RECV, &l) != ncclSuccess) return NULL;
  return l;
}

/* The chunk size a message of bytes is cut into (the same on both sides). */
static size_t chunk_of(const lane_t* l, size_t bytes) {
  size_t c = l->chunk;
  size_t most = (size_t)mpn_param_int(MPN_PARAM_UCX_CHUNKS);
  for (int j = 0; j < MAX_GROWTH && bytes > most * c; j++) c *= 2;
  return c;
}

/* Whether op's buffer goes to UCX as it is, unstaged: pinned host memory
 * (cudaHostAlloc, cudaHostRegister) always; device memory only as the source
 * of a send, where UCX reports CUDA support (ucp_context_query).  Not for
 * puts: the proxy's UCX runs its older protocols (UCX_PROTO_ENABLE=n), whose
 * RMA cannot read CUDA memory; not for receives: data a NIC writes into GPU
 * memory would need a flush (CU_STREAM_WAIT_VALUE_FLUSH) before the stream
 * reads it.  Device memory only with MPINCCL_UCX_DIRECT=2: that branch has
 * not run (no UCX here reports CUDA support), and the proxy thread, which
 * makes no CUDA call, has no current context, which UCX's CUDA transports
 * before their relaxed context handling need.  0 stages everything. */
static int op_direct(const mpn_op_t* op) {
  int direct = (int)mpn_param_int(MPN_PARAM_UCX_DIRECT);
  if (op->bytes == 0 || direct == 0) return 0;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, op->buf) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  if (a.type == cudaMemoryTypeHost) return a.hostPointer == op->buf;
  if (a.type != cudaMemoryTypeDevice || op->kind != MPN_OP_SEND || direct < 2) return 0;
  mpn_ucx_caps_t caps; /* probed once per process */
  return mpn_ucx_probe(&caps) == ncclSuccess && caps.cuda_memory;
}

/* Grows l's slots to hold chunks of a message of bytes; the old buffer is
 * kept until the lane goes, as chunks already enqueued use it. */
static ncclResult_t lane_fit(struct ncclComm* comm, lane_t* l, size_t bytes) {
  size_t c = chunk_of(l, bytes);
  if (c <= l->size) return ncclSuccess;
  char* grown = NULL;
  cudaError_t err = cudaHostAlloc((void**)&grown, (size_t)l->depth * c, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return mpn_error_set(comm, ncclUnhandledCudaError,
                         "staging a message of %zu bytes over UCX needs %d x %zu bytes of pinned "
                         "memory (MPINCCL_UCX_DEPTH x chunk): %s",
                         bytes, l->depth, c, cudaGetErrorString(err));
  }
  l->retired[l->nretired++] = l->buf;
  l->buf = grown;
  l->size = c;
  return ncclSuccess;
}

ncclResult_t mpn_ucx_staged_check(const mpn_op_t* op) {
  struct ncclComm* comm = op->comm;
  const char* fn = op->kind == MPN_OP_SEND   ? "ncclSend"
                   : op->kind == MPN_OP_RECV ? "ncclRecv"
                   : op->kind == MPN_OP_SIGNAL ? "ncclSignal"
                                               : "ncclPutSignal";
  int captured = op->capturing;
  if (mpn_ucx_comm_peer(comm, op->peer) == NULL)
    return mpn_error_set(comm, ncclInternalError, "%s: rank %d has no UCX address of rank %d", fn,
                         comm->rank, op->peer);
  /* The communicator's error, as ncclCommGetAsyncError reports it: a size
   * mismatch (ncclInvalidUsage) or a failed transfer (ncclRemoteError). */
  int failed = __atomic_load_n(mpn_ucx_comm_error(comm), __ATOMIC_ACQUIRE);
  if (failed != ncclSuccess)
    return mpn_error_set(comm, (ncclResult_t)failed,
                         "%s with peer %d: an earlier transfer over UCX of this communicator "
                         "failed (ncclCommGetAsyncError); abort it",
                         fn, op->peer);
  if (is_put(op) && !mpn_ucx_rma_ready(comm))
    return mpn_error_set(comm, ncclInvalidUsage,
                         "%s with peer %d: one-sided operations over UCX need a window "
                         "registered first (ncclCommWindowRegister)",
                         fn, op->peer);
  lane_t* l;
  if (captured) /* staged whole at capture: graph.c, or winstage.c for one-sided calls */
    return is_put(op) ? ncclSuccess : staged_get(comm);
  MPN_CHECK(lane_get(comm, op->peer, op->kind == MPN_OP_RECV, &l));
  return op_direct(op) ? ncclSuccess : lane_fit(comm, l, op->bytes);
}

/* A chunk that could not be issued whole fails the communicator (later
 * transfers are refused) and releases the lane's "done" words, so that the
 * lane waits for nothing that will not come.  Not the "ready" words: they
 * would start armed operations on slots whose copies have not run. */
static void lane_release(lane_t* l) {
  for (int i = l->depth; i < 2 * l->depth; i++)
    __atomic_store_n(&l->words[i], UINT64_MAX >> 1, __ATOMIC_RELEASE);
}

static void lane_fail(struct ncclComm* comm, lane_t* l, ncclResult_t res) {
  int ok = ncclSuccess;
  __atomic_compare_exchange_n(mpn_ucx_comm_error(comm), &ok, (int)res, 0, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
  lane_release(l);
}

/*
 * One chunk of op (bytes [off, off + len)) on its lane: the lane's waits,
 * copy and "ready" write, then the proxy's operation armed on "ready".  A
 * direct chunk (op_direct) has no copy: the proxy takes the user's buffer,
 * armed on "ready" (send) or "go" (receive) written where the lane's stream
 * reaches it, and direct_end waits for it.  Goes on past failures, so that
 * what the peer expects still happens; a chunk the proxy could not take
 * gets its "done" from here.
 */
static ncclResult_t chunk_issue(const mpn_driver_t* drv, mpn_op_t* op, lane_t* l, uint64_t msg,
                                uint64_t k, size_t off, size_t len, int last, int direct) {
  ncclResult_t first = ncclSuccess;
  int recv = op->kind == MPN_OP_RECV;
  uint64_t g = l->chunks++, d = (uint64_t)l->depth, slot = g % d;
  CUdeviceptr ready = l->dwords + (CUdeviceptr)(slot * sizeof(uint64_t));
  CUdeviceptr done = l->dwords + (CUdeviceptr)((d + slot) * sizeof(uint64_t));
  CUdeviceptr go = l->dwords + (CUdeviceptr)(2 * d * sizeof(uint64_t));
  char* dev = (char*)op->buf + off;
  char* buf = direct ? dev : l->buf + slot * l->size;
  mpn_memops_t b;
  mpn_memops_init(&b, drv, l->stream);
  if (recv && !direct) mpn_keep(&first, mpn_memops_add(&b, done, g + 1, MPN_MEMOP_WAIT_GEQ)); /* the data */
  else if (g >= d) mpn_keep(&first, mpn_memops_add(&b, done, g + 1 - d, MPN_MEMOP_WAIT_GEQ)); /* the slot */
  mpn_keep(&first, mpn_memops_flush(&b));
  if (len > 0 && !direct)
    mpn_keep(&first, mpn_cuda_result(NULL, recv ? cudaMemcpyAsync(dev, buf, len, cudaMemcpyHostToDevice, l->stream)
                                  : cudaMemcpyAsync(buf, dev, len, cudaMemcpyDeviceToHost, l->stream),
                             recv ? "copying a staged chunk to the device" : "staging a chunk"));
  mpn_keep(&first, mpn_memops_add(&b, recv && direct ? go : ready, g + 1, MPN_MEMOP_WRITE));
  mpn_keep(&first, mpn_memops_flush(&b));
  struct ncclComm* comm = op->comm;
  int src = recv ? op->peer : comm->rank, dst = recv ? comm->rank : op->peer;
  uint64_t tag = mpn_ucx_stage_tag(comm, src, dst, msg, k, last);
  mpn_ucx_part_t part = {off, op->bytes};
  mpn_ucx_trigger_t when = {&l->words[slot], recv ? (g + 1 > d ? g + 1 - d : 0) : g + 1, direct};
  if (recv && direct) when = (mpn_ucx_trigger_t){&l->words[2 * d], g + 1, 1};
  ncclResult_t posted = is_put(op) ? mpn_ucx_rma_post(op, buf, off, len, last, &when, &l->words[d + slot], g + 1,
                                                      &l->error, &l->words[d], l->depth)
                                   : mpn_ucx_tagged_on(comm, !recv, op->peer, buf, len, tag, &part,
                                                       recv && g < d && !direct ? NULL : &when, &l->words[d + slot],
                                                       g + 1, &l->error, &l->words[d], l->depth);
  mpn_keep(&first, posted);
  if (first != ncclSuccess) lane_fail(comm, l, first);
  return first;
}

/*
 * After the chunks [end - n, end) of a direct op on lane l: the lane waits
 * until UCX is done with each one not yet waited for by a later chunk of
 * the op in its slot, so that the join means the user's buffer is free
 * (send) or filled (receive); a receive then writes the slot's "ready", as
 * a staged chunk would once copied out (the slot's next staged receive is
 * armed on it: "done" words are written in order).  A send's may come after
 * later chunks of its lane ("done" only grows).
 */
static ncclResult_t direct_end(const mpn_driver_t* drv, const mpn_op_t* op, lane_t* l, uint64_t end,
                               uint64_t n) {
  ncclResult_t first = ncclSuccess;
  uint64_t d = (uint64_t)l->depth;
  mpn_memops_t b;
  mpn_memops_init(&b, drv, l->stream);
  for (uint64_t g = end - (n < d ? n : d); g < end; g++) {
    CUdeviceptr slot = (CUdeviceptr)(g % d);
    mpn_keep(&first, mpn_memops_add(&b, l->dwords + (d + slot) * sizeof(uint64_t), g + 1, MPN_MEMOP_WAIT_GEQ));
    if (op->kind == MPN_OP_RECV)
      mpn_keep(&first, mpn_memops_add(&b, l->dwords + slot * sizeof(uint64_t), g + 1, MPN_MEMOP_WRITE));
  }
  mpn_keep(&first, mpn_memops_flush(&b));
  if (first != ncclSuccess) lane_fail(op->comm, l, first);
  return first;
}

/* Makes lane l wait for the group's fork point on user stream s. */
static ncclResult_t lane_fork(lane_t* l, cudaStream_t s, cudaEvent_t* fork) {
  l->forked = 1; /* joined even if what follows fails (the caller then synchronizes) */
  if (*fork == NULL) {
    MPN_CHECK(mpn_event_of_stream(s, l->dev, fork));
    MPN_CHECK(mpn_cuda_result(NULL, cudaEventRecord(*fork, s), "recording where a group starts"));
  }
  return mpn_cuda_result(NULL, cudaStreamWaitEvent(l->stream, *fork, 0), "forking a UCX lane");
}

/* Whether ops i and j are on one stream of one device (stream handles such
 * as the legacy stream are per device). */
static int same_stream(const mpn_op_t* a, const mpn_op_t* b) {
  return a->stream == b->stream && a->comm->cuda_dev == b->comm->cuda_dev;
}

ncclResult_t mpn_ucx_staged_fork(mpn_op_t** ops, int n) {
  int saved = mpn_cuda_device_enter(-1);
  ncclResult_t first = ncclSuccess;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = same_stream(ops[j], ops[i]);
    if (seen) continue;
    mpn_keep(&first, mpn_cuda_set_device(ops[i]->comm->cuda_dev));
    cudaEvent_t fork = NULL;
    for (int j = i; j < n; j++) {
      lane_t* l = same_stream(ops[j], ops[i]) ? op_lane(ops[j]) : NULL;
      ncclResult_t res = l ? lane_fork(l, ops[i]->stream, &fork) : ncclSuccess;
      if (res != ncclSuccess && cudaStreamSynchronize(ops[i]->stream) != cudaSuccess) {
        cudaGetLastError(); /* the lane can start only after the stream's work: wait here */
        lane_fail(ops[j]->comm, l, res);
      }
      mpn_keep(&first, res);
    }
  }
  const mpn_driver_t* drv;
  ncclResult_t got = mpn_driver_get(&drv);
  mpn_keep(&first, got == ncclSuccess ? mpn_ucx_graph_fork(drv, ops, n) : got);
  mpn_cuda_device_leave(saved);
  return first;
}

/* Whether an op after the i-th uses lane l (lanes[j]: op j's). */
static int lane_used_later(lane_t* const* lanes, int n, int i, const lane_t* l) {
  for (int j = i + 1; j < n; j++)
    if (lanes[j] == l) return 1;
  return 0;
}

/*
 * Every send and put first, then every receive, each lane's in program order
 * (each lane numbers its own messages); then the ends of direct operations
 * (direct_end), except a receive's that a later message of its lane must
 * follow.  So no lane's wait for a peer sits, in a hardware queue shared
 * with another lane, ahead of a send's or receive's start that the peer
 * needs (see the top of this file).  Past a failure too: the peers' lanes
 * expect the other messages.
 */
ncclResult_t mpn_ucx_staged_launch(mpn_op_t** ops, int n) {
  const mpn_driver_t* drv;
  MPN_CHECK(mpn_driver_get(&drv));
  ncclResult_t first = ncclSuccess;
  int saved = mpn_cuda_device_enter(-1);
  uint64_t* ends = calloc((size_t)n, 2 * sizeof(uint64_t)); /* per direct op: end, chunks; NULL: none deferred */
  lane_t** lanes = calloc((size_t)n, sizeof(*lanes));       /* per op; NULL: none deferred */
  for (int i = 0; lanes && i < n; i++) lanes[i] = op_lane(ops[i]);
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++) {
      mpn_op_t* op = ops[i];
      lane_t* l = (op->kind == MPN_OP_RECV) == pass ? (lanes ? lanes[i] : op_lane(op)) : NULL;
      if (l == NULL) continue;
      mpn_keep(&first, mpn_cuda_set_device(op->comm->cuda_dev)); /* and on: the peers expect the messages */
      uint64_t msg = is_put(op) ? 0 : l->messages++; /* puts are not matched: no number */
      size_t c = chunk_of(l, op->bytes); /* <= l->size: mpn_ucx_staged_check fitted it */
      int direct = op_direct(op);
      if (op->bytes == 0) /* a signal, a put of nothing or a message of no bytes: one empty chunk */
        mpn_keep(&first, chunk_issue(drv, op, l, msg, 0, 0, 0, 1, 0));
      uint64_t k = 0;
      for (size_t off = 0; off < op->bytes; off += c, k++) {
        size_t len = op->bytes - off < c ? op->bytes - off : c;
        mpn_keep(&first, chunk_issue(drv, op, l, msg, k, off, len, off + len == op->bytes, direct));
      }
      if (direct && ends && lanes && !(pass == 1 && lane_used_later(lanes, n, i, l))) {
        ends[2 * i] = l->chunks, ends[2 * i + 1] = k;
      } else if (direct) {
        mpn_keep(&first, direct_end(drv, op, l, l->chunks, k));
      }
    }
  for (int i = 0; ends && lanes && i < n; i++)
    if (ends[2 * i + 1]) {
      mpn_keep(&first, mpn_cuda_set_device(ops[i]->comm->cuda_dev));
      mpn_keep(&first, direct_end(drv, ops[i], lanes[i], ends[2 * i], ends[2 * i + 1]));
    }
  free(lanes);
  free(ends);
  mpn_cuda_device_leave(saved);
  return first;
}

ncclResult_t mpn_ucx_staged_join(mpn_op_t** ops, int n) {
  ncclResult_t first = ncclSuccess;
  int saved = mpn_cuda_device_enter(-1);
  /* Each user stream waits for the lanes its messages used. */
  for (int i = 0; i < n; i++) {
    mpn_op_t* op = ops[i];
    lane_t* l = op_lane(op);
    if (l == NULL) continue;
    mpn_keep(&first, mpn_cuda_set_device(op->comm->cuda_dev));
    if (l->forked) { /* the first message of the lane records its end, once */
      mpn_keep(&first, mpn_cuda_result(NULL, cudaEventRecord(l->joined, l->stream), "recording a UCX lane's end"));
      l->forked = 0;
    }
    mpn_keep(&first, mpn_cuda_result(NULL, cudaStreamWaitEvent(op->stream, l->joined, 0), "joining a UCX lane"));
  }
  mpn_keep(&first, mpn_ucx_graph_join(ops, n)); /* the captured groups */
  mpn_cuda_device_leave(saved);
  return first;
}

/* Waits until send lane l's last chunks were taken by UCX (its stream ends
 * with their "ready" writes); 0 when the communicator failed or the deadline
 * passed first. */
static int sends_done(struct ncclComm* comm, lane_t* l, uint64_t deadline) {
  uint64_t d = (uint64_t)l->depth;
  if (__atomic_load_n(mpn_ucx_comm_error(comm), __ATOMIC_ACQUIRE) != ncclSuccess ||
      __atomic_load_n(&l->error, __ATOMIC_ACQUIRE) != ncclSuccess)
    return 0; /* released words say nothing of what the proxy still holds */
  for (uint64_t g = l->chunks > d ? l->chunks - d : 0; l->buf && g < l->chunks; g++)
    while (__atomic_load_n(&l->words[d + g % d], __ATOMIC_ACQUIRE) < g + 1) {
      if (__atomic_load_n(mpn_ucx_comm_error(comm), __ATOMIC_ACQUIRE) != ncclSuccess || mpn_clock_now_ns() > deadline)
        return 0;
      usleep(20);
    }
  return 1;
}

static uint64_t net_deadline(void) {
  return mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_NET_TIMEOUT) * 1000000000ull;
}

void mpn_ucx_staged_release(struct ncclComm* comm) {
  for (int i = 0; comm->staged && i < 2 * comm->nranks; i++)
    if (comm->staged->lanes[i].words) lane_release(&comm->staged->lanes[i]);
}

int mpn_ucx_staged_quiesce(struct ncclComm* comm) {
  int failed = comm->ucx && __atomic_load_n(mpn_ucx_comm_error(comm), __ATOMIC_ACQUIRE) != ncclSuccess;
  if (comm->staged == NULL) return !failed;
  lane_t* lanes = comm->staged->lanes;
  int n = 2 * comm->nranks;
  /* The lanes' streams, then the proxy's last sends; a failed
   * communicator, or a peer silent past MPINCCL_NET_TIMEOUT, ends the wait
   * and releases what still waits. */
  uint64_t deadline = net_deadline();
  int clean = 1;
  for (int i = 0; i < n; i++) {
    lane_t* l = &lanes[i];
    uint64_t released = 0;
    cudaError_t q = cudaSuccess;
    while (l->stream && (q = cudaStreamQuery(l->stream)) == cudaErrorNotReady) {
      uint64_t now = mpn_clock_now_ns();
      if (released && now > released + 1000000000ull)
        break; /* still held (by the stream it forked from): given up, leaked */
      if (!released && (__atomic_load_n(mpn_ucx_comm_error(comm), __ATOMIC_ACQUIRE) != ncclSuccess ||
                        now > deadline)) {
        lane_release(l);
        released = now;
        clean = 0;
      }
      usleep(20);
    }
    mpn_cuda_forget(q);
    if (i % 2 == 0 && clean) clean = sends_done(comm, l, deadline);
  }
  if (clean) clean = mpn_ucx_graph_quiesce(comm->staged->graphs, mpn_ucx_comm_error(comm), deadline);
  comm->staged->clean = clean && !failed;
  return comm->staged->clean;
}

ncclResult_t mpn_ucx_staged_drain(struct ncclComm* comm) {
  if (comm->staged == NULL) return ncclSuccess;
  uint64_t deadline = net_deadline();
  for (int i = 0; i < 2 * comm->nranks; i += 2) {
    lane_t* l = &comm->staged->lanes[i];
    cudaError_t q = cudaSuccess;
    while (l->stream && (q = cudaStreamQuery(l->stream)) == cudaErrorNotReady && mpn_clock_now_ns() < deadline)
      usleep(20);
    mpn_cuda_forget(q);
    if (sends_done(comm, l, deadline)) continue;
    int failed = __atomic_load_n(mpn_ucx_comm_error(comm), __ATOMIC_ACQUIRE);
    if (failed != ncclSuccess) /* (sends_done gives up at once then) */
      return mpn_error_set(comm, (ncclResult_t)failed,
                           "transfers to rank %d over UCX did not all complete: an earlier transfer of this "
                           "communicator failed (ncclCommGetAsyncError)",
                           i / 2);
    return mpn_error_set(comm, ncclRemoteError,
                         "transfers to rank %d over UCX did not complete within "
                         "MPINCCL_NET_TIMEOUT (%lld s)",
                         i / 2, (long long)mpn_param_int(MPN_PARAM_NET_TIMEOUT));
  }
  return ncclSuccess;
}

void mpn_ucx_staged_kill_graphs(struct ncclComm* comm) {
  if (comm->staged) mpn_ucx_graph_kill_list(comm->staged->graphs);
}

void mpn_ucx_staged_free(struct ncclComm* comm) {
  if (comm->staged == NULL) return;
  for (int i = 0; i < 2 * comm->nranks; i++) {
    lane_t* l = &comm->staged->lanes[i];
    if (!comm->staged->clean && l->buf) {
      /* Aborted, or a peer that did not finish: UCX may still hold an
       * operation on these buffers that its cancel did not end.  Leaked,
       * so that it writes into memory nobody else has. */
      l->buf = NULL;
      l->nretired = 0;
      l->words = NULL;
    }
    lane_free(l);
  }
  mpn_ucx_graph_free_list(comm->staged->graphs, !comm->staged->clean);
  free(comm->staged->lanes);
  free(comm->staged->gcount);
  free(comm->staged);
  comm->staged = NULL;
}
