/*
 * staged.c - ncclSend/ncclRecv of device memory with peers over UCX, through
 * pinned host buffers (UCX here has no CUDA support).
 *
 * Each (peer, direction) is a lane: MPINCCL_UCX_DEPTH slots of
 * MPINCCL_UCX_CHUNK bytes of pinned host memory, and per slot two host
 * words mapped for the GPU, "ready" (written by the stream) and "done"
 * (written by the proxy).  Messages are cut into chunks; the n-th chunk of a
 * lane uses slot n % depth and both words carry n + 1:
 *   send: the stream waits until the slot's previous chunk was sent
 *         ("done" >= n + 1 - depth), copies the chunk device-to-host, writes
 *         "ready" = n + 1; the proxy, armed on that word, sends the chunk and
 *         writes "done" = n + 1 when UCX has it.
 *   recv: the proxy, armed on "ready" >= n + 1 - depth (the stream copied the
 *         slot's previous chunk out), posts the receive and writes "done" =
 *         n + 1 when the data is there; the stream waits for it, copies the
 *         chunk host-to-device and writes "ready" = n + 1.
 * So the copies of one chunk overlap the transfer of the next ones, and the
 * API thread only arms operations and enqueues stream work: it never waits.
 * Chunks are matched by tag (message number with the peer, chunk number), so
 * the two sides may group their calls differently.
 *
 * A stream's sends and receives of one group advance in rounds: round r
 * issues the r-th chunk of every lane the stream uses, sends before
 * receives.  A chunk then waits only for chunks of earlier rounds (or for a
 * send of the same round of the peer, which waits for nothing of this
 * round), so two ranks that send each other messages of any length in one
 * group both progress.  Not capturable in CUDA graphs yet: the armed
 * operations are host work a replay would not repeat.
 */
#include "ucx/staged.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "cuda/driver.h"
#include "cuda/memop.h"
#include "transport.h"
#include "ucx/net.h"

typedef struct {
  char* buf;          /* depth * chunk bytes, pinned */
  uint64_t* words;    /* pinned, mapped: [slot] "ready", [depth + slot] "done" */
  CUdeviceptr dwords; /* the words as the GPU sees them */
  size_t chunk;
  int depth;
  uint64_t chunks;    /* chunks enqueued so far */
  uint64_t messages;  /* messages enqueued so far (tags) */
  int error;          /* an ncclResult_t, set by the proxy */
} lane_t;

struct mpn_ucx_staged {
  lane_t* lanes; /* 2 * nranks: [2 * peer] sends to peer, [2 * peer + 1] receives */
};

static void lane_free(lane_t* l) {
  if (l->buf) cudaFreeHost(l->buf);
  if (l->words) cudaFreeHost(l->words);
  cudaGetLastError();
  memset(l, 0, sizeof(*l));
}

static ncclResult_t lane_get(struct ncclComm* comm, int peer, int recv, lane_t** out) {
  if (comm->staged == NULL) {
    struct mpn_ucx_staged* st = calloc(1, sizeof(*st));
    lane_t* lanes = calloc(2 * (size_t)comm->nranks, sizeof(*lanes));
    if (st == NULL || lanes == NULL) {
      free(st), free(lanes);
      return mpn_error_set(comm, ncclSystemError, "out of memory");
    }
    st->lanes = lanes;
    comm->staged = st;
  }
  lane_t* l = &comm->staged->lanes[2 * peer + recv];
  *out = l;
  if (l->buf != NULL) return ncclSuccess;
  l->chunk = (size_t)mpn_param_int(MPN_PARAM_UCX_CHUNK);
  l->depth = (int)mpn_param_int(MPN_PARAM_UCX_DEPTH);
  size_t words = 2 * (size_t)l->depth * sizeof(uint64_t);
  void* d = NULL;
  cudaError_t err = cudaHostAlloc((void**)&l->buf, (size_t)l->depth * l->chunk, cudaHostAllocPortable);
  if (err == cudaSuccess)
    err = cudaHostAlloc((void**)&l->words, words, cudaHostAllocPortable | cudaHostAllocMapped);
  if (err == cudaSuccess) {
    memset(l->words, 0, words);
    err = cudaHostGetDevicePointer(&d, l->words, 0);
  }
  if (err != cudaSuccess) {
    lane_free(l);
    return mpn_error_set(comm, ncclUnhandledCudaError,
                         "staging buffers for rank %d over UCX (%d x %lld bytes, "
                         "MPINCCL_UCX_DEPTH x MPINCCL_UCX_CHUNK): %s",
                         peer, (int)mpn_param_int(MPN_PARAM_UCX_DEPTH),
                         (long long)mpn_param_int(MPN_PARAM_UCX_CHUNK), cudaGetErrorString(err));
  }
  l->dwords = (CUdeviceptr)d;
  return ncclSuccess;
}

ncclResult_t mpn_ucx_staged_check(const mpn_op_t* op) {
  struct ncclComm* comm = op->comm;
  const char* fn = op->kind == MPN_OP_SEND ? "ncclSend" : "ncclRecv";
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(op->stream, &cap) != cudaSuccess) cudaGetLastError();
  if (cap != cudaStreamCaptureStatusNone)
    return mpn_error_set(comm, ncclInvalidUsage,
                         "%s with peer %d: transfers over UCX cannot be captured in a CUDA graph "
                         "in this version of mpinccl",
                         fn, op->peer);
  return ncclSuccess;
}

/* One message of a stream's launch: its lane and how far it has come. */
typedef struct {
  mpn_op_t* op;
  lane_t* lane;
  uint64_t msg;   /* the message's number on its lane (tags) */
  size_t chunks;  /* how many */
  size_t issued;  /* chunks enqueued so far */
} msg_t;

static ncclResult_t cuda_result(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return ncclSuccess;
  cudaGetLastError();
  return mpn_error_set(NULL, ncclUnhandledCudaError, "%s failed: %s", what, cudaGetErrorString(err));
}

static void keep(ncclResult_t* first, ncclResult_t res) {
  if (res != ncclSuccess && *first == ncclSuccess) *first = res;
}

/* The message of m's lane whose turn it is in this round: the first one of
 * that lane with chunks left (a lane's messages go one after the other). */
static int lane_turn(const msg_t* m, int n, int i) {
  for (int j = 0; j < n; j++)
    if (m[j].lane == m[i].lane && m[j].issued < m[j].chunks) return j == i;
  return 0;
}

/*
 * One half of a round on stream s: the next chunk of every lane whose
 * messages go the way recv says: the waits (one batch), the copies, the
 * writes (one batch); then the proxy operations are armed.
 */
static ncclResult_t round_half(const mpn_driver_t* drv, msg_t* m, int n, int* turn, cudaStream_t s,
                               int recv) {
  ncclResult_t first = ncclSuccess;
  int k = 0; /* turn[0..k): the messages that move a chunk now, one per lane */
  for (int i = 0; i < n; i++)
    if ((m[i].op->kind == MPN_OP_RECV) == recv && lane_turn(m, n, i)) turn[k++] = i;
  if (k == 0) return ncclSuccess;
  mpn_memops_t b;
  mpn_memops_init(&b, drv, s);
  for (int t = 0; t < k; t++) { /* waits: a free slot (send), the data (receive) */
    lane_t* l = m[turn[t]].lane;
    uint64_t g = l->chunks, slot = g % (uint64_t)l->depth;
    CUdeviceptr done = l->dwords + (CUdeviceptr)((l->depth + slot) * sizeof(uint64_t));
    if (recv) keep(&first, mpn_memops_add(&b, done, g + 1, MPN_MEMOP_WAIT_GEQ));
    else if (g >= (uint64_t)l->depth)
      keep(&first, mpn_memops_add(&b, done, g + 1 - (uint64_t)l->depth, MPN_MEMOP_WAIT_GEQ));
  }
  keep(&first, mpn_memops_flush(&b));
  for (int t = 0; t < k; t++) { /* copies */
    msg_t* x = &m[turn[t]];
    lane_t* l = x->lane;
    uint64_t g = l->chunks;
    size_t off = x->issued * l->chunk, len = x->op->bytes - off < l->chunk ? x->op->bytes - off : l->chunk;
    char* stage = l->buf + (g % (uint64_t)l->depth) * l->chunk;
    char* dev = (char*)x->op->buf + off;
    keep(&first, cuda_result(recv ? cudaMemcpyAsync(dev, stage, len, cudaMemcpyHostToDevice, s)
                                  : cudaMemcpyAsync(stage, dev, len, cudaMemcpyDeviceToHost, s),
                             recv ? "copying a staged chunk to the device" : "staging a chunk"));
  }
  for (int t = 0; t < k; t++) { /* writes: "ready" */
    lane_t* l = m[turn[t]].lane;
    uint64_t g = l->chunks, slot = g % (uint64_t)l->depth;
    keep(&first, mpn_memops_add(&b, l->dwords + (CUdeviceptr)(slot * sizeof(uint64_t)), g + 1,
                                MPN_MEMOP_WRITE));
  }
  keep(&first, mpn_memops_flush(&b));
  for (int t = 0; t < k; t++) { /* the proxy's part, armed on "ready" */
    msg_t* x = &m[turn[t]];
    lane_t* l = x->lane;
    struct ncclComm* comm = x->op->comm;
    uint64_t g = l->chunks++, slot = g % (uint64_t)l->depth, d = (uint64_t)l->depth;
    size_t off = x->issued * l->chunk, len = x->op->bytes - off < l->chunk ? x->op->bytes - off : l->chunk;
    int src = recv ? x->op->peer : comm->rank;
    uint64_t tag = mpn_ucx_stage_tag(comm, src, x->msg, x->issued);
    mpn_ucx_trigger_t when = {&l->words[slot], recv ? (g + 1 > d ? g + 1 - d : 0) : g + 1};
    keep(&first, mpn_ucx_tagged_on(comm, !recv, x->op->peer, l->buf + slot * l->chunk, len, tag,
                                   recv && g < d ? NULL : &when, &l->words[d + slot], g + 1,
                                   &l->error, &l->words[d], l->depth));
    x->issued++;
  }
  return first;
}

/* Stream s's messages of the launch (m, n in all), chunk by chunk in rounds. */
static ncclResult_t stream_launch(const mpn_driver_t* drv, const msg_t* all, int n, cudaStream_t s) {
  msg_t* m = calloc((size_t)n, sizeof(*m));
  int* turn = calloc((size_t)n, sizeof(*turn));
  if (m == NULL || turn == NULL) {
    free(m), free(turn);
    return mpn_error_set(NULL, ncclSystemError, "out of memory");
  }
  int k = 0;
  for (int i = 0; i < n; i++)
    if (all[i].op->stream == s) m[k++] = all[i];
  ncclResult_t first = ncclSuccess;
  for (int more = k > 0; more;) {
    keep(&first, round_half(drv, m, k, turn, s, 0));
    keep(&first, round_half(drv, m, k, turn, s, 1));
    more = 0;
    for (int i = 0; i < k; i++) more |= m[i].issued < m[i].chunks;
  }
  free(m);
  free(turn);
  return first;
}

ncclResult_t mpn_ucx_staged_launch(mpn_op_t** ops, int n) {
  const mpn_driver_t* drv;
  MPN_CHECK(mpn_driver_get(&drv));
  msg_t* all = calloc((size_t)(n ? n : 1), sizeof(*all));
  if (all == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  int saved = -1;
  cudaGetDevice(&saved);
  ncclResult_t first = ncclSuccess;
  /* Messages are numbered per lane in program order, whatever their stream:
   * the peer numbers its side the same way (the n-th send matches the n-th
   * receive), and the tags carry the numbers. */
  int k = 0;
  for (int i = 0; i < n; i++) {
    mpn_op_t* op = ops[i];
    if (op->bytes == 0) continue;
    lane_t* l = NULL;
    cudaSetDevice(op->comm->cuda_dev);
    ncclResult_t res = lane_get(op->comm, op->peer, op->kind == MPN_OP_RECV, &l);
    if (res != ncclSuccess) {
      keep(&first, res);
      continue;
    }
    all[k++] = (msg_t){op, l, l->messages++, (op->bytes + l->chunk - 1) / l->chunk, 0};
  }
  for (int i = 0; i < k; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = all[j].op->stream == all[i].op->stream;
    if (seen) continue;
    cudaSetDevice(all[i].op->comm->cuda_dev);
    keep(&first, stream_launch(drv, all, k, all[i].op->stream));
  }
  if (saved >= 0) cudaSetDevice(saved);
  free(all);
  return first;
}

void mpn_ucx_staged_free(struct ncclComm* comm) {
  if (comm->staged == NULL) return;
  for (int i = 0; i < 2 * comm->nranks; i++) lane_free(&comm->staged->lanes[i]);
  free(comm->staged->lanes);
  free(comm->staged);
  comm->staged = NULL;
}
