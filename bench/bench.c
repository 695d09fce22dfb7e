/*
 * bench.c - mpinccl_bench: an nccl-tests-style benchmark of send/receive
 * patterns (ring, all-to-all, ping-pong, 3D halo with 26 neighbours) whose
 * figures are reported as ratios to floors measured in the same run with
 * plain CUDA (bench_floors.h).  Built against mpinccl by default, against
 * NVIDIA's NCCL with -DBENCH_WITH_NVIDIA_NCCL (bench/GNUmakefile).
 */
#include "bench.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_kernels.h"

#define NO_GPU_MESSAGE \
  "mpinccl_bench: no CUDA GPU found on this machine (on every rank); this benchmark needs one"
#define SEGMENT_ALIGN 256

static int world_rank, world_size;

/* Every failure of CUDA or NCCL ends the whole job: an error seen by one rank
 * would leave the others waiting for data that never comes. */
#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    cudaError_t err_ = (call);                                                      \
    if (err_ != cudaSuccess) {                                                      \
      fprintf(stderr, "mpinccl_bench: rank %d: %s failed: %s\n", world_rank, #call, \
              cudaGetErrorString(err_));                                            \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                 \
    }                                                                               \
  } while (0)

#define NCCL_CHECK(comm, call)                                                               \
  do {                                                                                       \
    ncclResult_t res_ = (call);                                                              \
    if (res_ != ncclSuccess) {                                                               \
      fprintf(stderr, "mpinccl_bench: rank %d: %s failed: %s; last error: %s\n", world_rank, \
              #call, ncclGetErrorString(res_), ncclGetLastError(comm));                      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    }                                                                                        \
  } while (0)

/* ------------------------------------------------------- GPUs and regime -- */

/* 1 when every rank sees a GPU; a failing cudaGetDeviceCount (no driver)
 * counts as none. */
static int gpus_everywhere(int* ndev) {
  if (cudaGetDeviceCount(ndev) != cudaSuccess) {
    (void)cudaGetLastError();
    *ndev = 0;
  }
  int mine = *ndev > 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* Ranks of a host share its GPUs round robin; counts GPUs by UUID, ranks per
 * GPU, MPS, and whether ranks 0 and 1 share a host (for the exchange floors). */
static void topo_detect(int ndev, topo_t* t) {
  MPI_Comm node;
  int local_rank, local_size;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  int dev = local_rank % ndev;
  CUDA_CHECK(cudaSetDevice(dev));
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  char* uuids = malloc((size_t)local_size * 16);
  if (uuids == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Allgather(prop.uuid.bytes, 16, MPI_BYTE, uuids, 16, MPI_BYTE, node);
  int same = 0, distinct = 0;
  for (int i = 0; i < local_size; i++) {
    same += memcmp(uuids + 16 * i, prop.uuid.bytes, 16) == 0;
    int first = 1;
    for (int j = 0; j < i && first; j++) first = memcmp(uuids + 16 * i, uuids + 16 * j, 16) != 0;
    distinct += first;
  }
  free(uuids);
  int leader_gpus = local_rank == 0 ? distinct : 0, mps = 0;
  MPI_Allreduce(&leader_gpus, &t->gpus, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&same, &t->ranks_per_gpu, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, dev) != cudaSuccess) {
    (void)cudaGetLastError(); /* a driver without the attribute has no MPS to report */
    mps = 0;
  }
  mps = mps != 0;
  int mps_min = 0;
  MPI_Allreduce(&mps, &t->mps, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&mps, &mps_min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  t->mps_mixed = t->mps != mps_min;
  int node_first = world_rank, rank1_first = 0;
  MPI_Allreduce(MPI_IN_PLACE, &node_first, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  if (world_size > 1) {
    rank1_first = node_first;
    MPI_Bcast(&rank1_first, 1, MPI_INT, 1, MPI_COMM_WORLD);
  }
  t->pair_same_node = world_size > 1 && rank1_first == 0;
  snprintf(t->gpu_name, sizeof(t->gpu_name), "%s", prop.name);
  MPI_Bcast(t->gpu_name, sizeof(t->gpu_name), MPI_CHAR, 0, MPI_COMM_WORLD);
}

/* Without MPS, ranks sharing a GPU time-slice and a data exchange needs an
 * engine: the delegated exchange is the floor.  With MPS, or one rank per
 * GPU, nothing switches and the flag-only exchange is. */
static void floor_choose(bench_t* b) {
  int sliced = !b->topo.mps && b->topo.ranks_per_gpu > 1;
  op_t op = b->o->op;
  if (b->o->net) { /* the UCX path: UCX's own put latency */
    b->floor_name = "UCX put";
    b->floor_us = b->net.measured ? b->net.put_us : -1;
  } else if (op == OP_BARRIER || !sliced) { /* signals only, or nothing switches */
    b->floor_name = "flag-only";
    b->floor_us = b->floors.flag_us;
  } else if (op == OP_PUTPINGPONG || op == OP_RMAALLTOALL) {
    /* A put is engine work of the side that puts: here both sides put in turn.
     * (A one-way put has one side only waiting: the delegated floor's shape.) */
    b->floor_name = "engine";
    b->floor_us = b->floors.engine_us;
  } else {
    b->floor_name = "delegated";
    b->floor_us = b->floors.delegated_us;
  }
}

/* ----------------------------------------------------------------- plans -- */

static uint64_t key_of(int sender, unsigned tag) { return (uint64_t)sender << 32 | tag; }

static size_t align_up(size_t n) { return (n + SEGMENT_ALIGN - 1) / SEGMENT_ALIGN * SEGMENT_ALIGN; }

/* The halo rule: the face is a square plane of 8-byte cells, L = floor(sqrt(
 * face / 8)) cells on a side (at least 1); an edge is a line of L cells,
 * a corner one cell. */
static size_t halo_edge_bytes(size_t face) {
  size_t cells = face / 8, l = 1;
  while ((l + 1) * (l + 1) <= cells) l++;
  return 8 * l;
}

static void halo_setup(bench_t* b) {
  int periods[3] = {1, 1, 1}, c[3];
  b->dims[0] = b->dims[1] = b->dims[2] = 0;
  MPI_Dims_create(world_size, 3, b->dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 3, b->dims, periods, 0, &cart); /* no reorder: ranks stay */
  MPI_Cart_coords(cart, world_rank, 3, c);
  for (int i = 0; i < HALO_DIRS; i++) {
    int nc[3] = {c[0] + i % 3 - 1, c[1] + i / 3 % 3 - 1, c[2] + i / 9 - 1};
    MPI_Cart_rank(cart, nc, &b->nbr[i]); /* periodic: wraps */
  }
  MPI_Comm_free(&cart);
}

/* NCCL pairs the k-th send from A to B with the k-th receive on B from A.
 * Step i sends segment i to nbr[i] and receives segment i of nbr[26 - i]
 * into our slot 26 - i.  On a torus B = nbr_A[i] exactly when A =
 * nbr_B[26 - i], so B receives from A at the same steps i, in the same
 * order, as A sends to B, and sizes agree (i and 26 - i are of one kind). */
static void plan_halo(bench_t* b, size_t face) {
  size_t seg_off[HALO_DIRS], seg_bytes[HALO_DIRS], off = 0;
  b->edge = halo_edge_bytes(face);
  for (int i = 0; i < HALO_DIRS; i++) {
    int kind = (i % 3 != 1) + (i / 3 % 3 != 1) + (i / 9 != 1); /* 1 face, 2 edge, 3 corner */
    seg_bytes[i] = kind == 1 ? face : kind == 2 ? b->edge : kind == 3 ? HALO_CORNER_BYTES : 0;
    seg_off[i] = off;
    off = align_up(off + seg_bytes[i]);
  }
  b->nmsgs = 0;
  b->rank_bytes = 0;
  for (int i = 0; i < HALO_DIRS; i++) {
    if (i == HALO_SELF) continue;
    int from = b->nbr[HALO_DIRS - 1 - i];
    b->msgs[b->nmsgs++] = (msg_t){.send_peer = b->nbr[i],
                                  .recv_peer = from,
                                  .send_off = seg_off[i],
                                  .recv_off = seg_off[HALO_DIRS - 1 - i],
                                  .bytes = seg_bytes[i],
                                  .send_key = key_of(world_rank, i),
                                  .recv_key = key_of(from, i)};
    b->rank_bytes += (double)seg_bytes[i];
  }
}

/* The messages of one iteration at this size; 0 when the size is skipped. */
static int plan_build(bench_t* b, size_t size) {
  int r = world_rank, n = world_size;
  b->size = size;
  b->rank_bytes = (double)size;
  b->nmsgs = 0;
  switch (b->o->op) {
    case OP_SENDRECV:
      b->msgs[b->nmsgs++] = (msg_t){.send_peer = (r + 1) % n,
                                    .recv_peer = (r + n - 1) % n,
                                    .bytes = size,
                                    .send_key = key_of(r, 0),
                                    .recv_key = key_of((r + n - 1) % n, 0)};
      break;
    case OP_ALLTOALL:
    case OP_RMAALLTOALL: {
      size_t chunk = size / (size_t)n;
      if (chunk == 0) return 0;
      b->size = chunk * (size_t)n;
      b->rank_bytes = (double)b->size;
      for (int p = 0; p < n; p++)
        b->msgs[b->nmsgs++] = (msg_t){.send_peer = p,
                                      .recv_peer = p,
                                      .send_off = p * chunk,
                                      .recv_off = p * chunk,
                                      .bytes = chunk,
                                      .send_key = key_of(r, p),
                                      .recv_key = key_of(p, r)};
      break;
    }
    case OP_PUT:
      if (r < 2)
        b->msgs[b->nmsgs++] = (msg_t){.send_peer = r == 0 ? 1 : -1,
                                      .recv_peer = r == 1 ? 0 : -1,
                                      .bytes = size,
                                      .send_key = key_of(0, 1),
                                      .recv_key = key_of(0, 1)};
      break;
    case OP_BARRIER:
      b->size = 0;
      b->rank_bytes = 0;
      return size == b->o->minbytes; /* one row */
    case OP_PUTPINGPONG:
    case OP_PINGPONG: /* rank 1 echoes what it receives: both check rank 0's pattern */
      if (r < 2)
        b->msgs[b->nmsgs++] = (msg_t){.send_peer = r == 0 ? 1 : -1,
                                      .recv_peer = r ^ 1,
                                      .bytes = size,
                                      .send_key = key_of(0, 0),
                                      .recv_key = key_of(0, 0)};
      break;
    case OP_HALO: plan_halo(b, size); break;
    case OP_COUNT: break;
  }
  return 1;
}

/* ------------------------------------------------------------- iteration -- */

/* Enqueues one iteration; returns the first failure and names its call in
 * *what.  A group once started is always ended, even after a failure inside
 * it (group_open), so a capture that failed leaves no group open behind it. */
static ncclResult_t iter_enqueue(bench_t* b, const char** what) {
  ncclResult_t res = ncclSuccess, got;
  int group_open = 0;
#define BENCH_TRY(call)                                        \
  do {                                                         \
    if (res == ncclSuccess && (got = (call)) != ncclSuccess) { \
      res = got;                                               \
      *what = #call;                                           \
    }                                                          \
  } while (0)
#define BENCH_GROUP_START()          \
  do {                               \
    BENCH_TRY(ncclGroupStart());     \
    group_open = res == ncclSuccess; \
  } while (0)
#define BENCH_GROUP_END()                                       \
  do {                                                          \
    if (group_open) {                                           \
      got = ncclGroupEnd(); /* (even after a failure inside) */ \
      if (res == ncclSuccess && got != ncclSuccess) {           \
        res = got;                                              \
        *what = "ncclGroupEnd()";                               \
      }                                                         \
      group_open = 0;                                           \
    }                                                           \
  } while (0)
  ncclComm_t c = b->comm;
  cudaStream_t s = b->stream;
  if (b->o->op == OP_PINGPONG) {
    double t0 = MPI_Wtime();
    if (world_rank == 0) {
      BENCH_TRY(ncclSend(b->sendbuf, b->size, ncclInt8, 1, c, s));
      BENCH_TRY(ncclRecv(b->recvbuf, b->size, ncclInt8, 1, c, s));
    } else if (world_rank == 1) {
      BENCH_TRY(ncclRecv(b->recvbuf, b->size, ncclInt8, 0, c, s));
      BENCH_TRY(ncclSend(b->recvbuf, b->size, ncclInt8, 0, c, s));
    }
    b->host_s += MPI_Wtime() - t0;
    return res;
  }
#if BENCH_HAVE_RMA
  if (bench_op_rma(b->o->op)) {
    double t0 = MPI_Wtime();
    op_t op = b->o->op;
    int n = world_size, r = world_rank;
    ncclWaitSignalDesc_t one = {1, r ^ 1, 0, 0};
    if (op == OP_PUT && r == 0) BENCH_TRY(ncclPutSignal(b->sendbuf, b->size, ncclInt8, 1, b->win, 0, 0, 0, 0, c, s));
    if (op == OP_PUT && r == 1) BENCH_TRY(ncclWaitSignal(1, &one, c, s));
    if (op == OP_PUTPINGPONG && r == 0) {
      BENCH_TRY(ncclPutSignal(b->sendbuf, b->size, ncclInt8, 1, b->win, 0, 0, 0, 0, c, s));
      BENCH_TRY(ncclWaitSignal(1, &one, c, s));
    }
    if (op == OP_PUTPINGPONG && r == 1) { /* echo what arrived */
      BENCH_TRY(ncclWaitSignal(1, &one, c, s));
      BENCH_TRY(ncclPutSignal(b->recvbuf, b->size, ncclInt8, 0, b->win, 0, 0, 0, 0, c, s));
    }
    if (op == OP_BARRIER || op == OP_RMAALLTOALL) {
      BENCH_GROUP_START();
      for (int i = 0; i < b->nmsgs; i++) { /* all-to-all: our block lands at r * chunk */
        const msg_t* m = &b->msgs[i];
        BENCH_TRY(ncclPutSignal(b->sendbuf + m->send_off, m->bytes, ncclInt8, m->send_peer, b->win,
                                (size_t)r * m->bytes, 0, 0, 0, c, s));
      }
      for (int p = 0; op == OP_BARRIER && p < n; p++) BENCH_TRY(ncclSignal(p, 0, 0, 0, c, s));
      BENCH_TRY(ncclWaitSignal(n, b->all_peers, c, s));
      BENCH_GROUP_END();
    }
    b->host_s += MPI_Wtime() - t0;
    return res;
  }
#endif
  double t0 = MPI_Wtime();
  BENCH_GROUP_START();
  if (res != ncclSuccess) return res;
  for (int i = 0; i < b->nmsgs; i++) {
    const msg_t* m = &b->msgs[i];
    if (m->send_peer >= 0)
      BENCH_TRY(ncclSend(b->sendbuf + m->send_off, m->bytes, ncclInt8, m->send_peer, c, s));
    if (m->recv_peer >= 0)
      BENCH_TRY(ncclRecv(b->recvbuf + m->recv_off, m->bytes, ncclInt8, m->recv_peer, c, s));
  }
  BENCH_GROUP_END();
  b->host_s += MPI_Wtime() - t0;
#undef BENCH_GROUP_END
#undef BENCH_GROUP_START
#undef BENCH_TRY
  return res;
}

static void iter_run(bench_t* b) {
  const char* what = "";
  ncclResult_t res = iter_enqueue(b, &what);
  if (res != ncclSuccess) {
    fprintf(stderr, "mpinccl_bench: rank %d: %s failed: %s; last error: %s\n", world_rank, what,
            ncclGetErrorString(res), ncclGetLastError(b->comm));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Captures the timed iterations; on failure says why in why. */
static int graph_capture(bench_t* b, cudaGraphExec_t* exec, char* why, size_t whylen) {
  cudaError_t ce = cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal);
  if (ce != cudaSuccess) {
    snprintf(why, whylen, "cudaStreamBeginCapture: %s", cudaGetErrorString(ce));
    return -1;
  }
  const char* what = "";
  ncclResult_t res = ncclSuccess;
  for (int it = 0; it < b->o->iters && res == ncclSuccess; it++) res = iter_enqueue(b, &what);
  cudaGraph_t graph = NULL;
  ce = cudaStreamEndCapture(b->stream, &graph);
  if (res == ncclSuccess && ce == cudaSuccess) {
    ce = cudaGraphInstantiate(exec, graph, 0);
    if (ce == cudaSuccess) ce = cudaGraphUpload(*exec, b->stream);
  }
  if (graph) cudaGraphDestroy(graph);
  if (res != ncclSuccess)
    snprintf(why, whylen, "%s returned %s; last error: %s", what, ncclGetErrorString(res),
             ncclGetLastError(b->comm));
  else if (ce != cudaSuccess)
    snprintf(why, whylen, "cudaStreamEndCapture/cudaGraphInstantiate: %s", cudaGetErrorString(ce));
  (void)cudaGetLastError();
  return res == ncclSuccess && ce == cudaSuccess ? 0 : -1;
}

/* ---------------------------------------------------------------- a size -- */

static void data_prepare(bench_t* b) {
  for (int i = 0; i < b->nmsgs; i++) {
    const msg_t* m = &b->msgs[i];
    if (m->send_peer >= 0)
      CUDA_CHECK(bench_pattern_fill(b->sendbuf + m->send_off, m->bytes, m->send_key, b->stream));
  }
  CUDA_CHECK(cudaMemsetAsync(b->recvbuf, 0, b->recvcap, b->stream));
}

/* Bytes that differ from the pattern, over all ranks, and bytes written
 * outside the messages: once checked, the messages are cleared, and the
 * receive buffer (cleared before the iterations) must then be all 0. */
static long long data_check(bench_t* b) {
  unsigned long long wrong = 0, all = 0;
  CUDA_CHECK(cudaMemsetAsync(b->wrong_dev, 0, sizeof(*b->wrong_dev), b->stream));
  for (int i = 0; i < b->nmsgs; i++) {
    const msg_t* m = &b->msgs[i];
    if (m->recv_peer >= 0)
      CUDA_CHECK(bench_pattern_check(b->recvbuf + m->recv_off, m->bytes, m->recv_key, b->wrong_dev,
                                     b->stream));
  }
  for (int i = 0; i < b->nmsgs; i++) {
    const msg_t* m = &b->msgs[i];
    if (m->recv_peer >= 0 && m->bytes > 0)
      CUDA_CHECK(cudaMemsetAsync(b->recvbuf + m->recv_off, 0, m->bytes, b->stream));
  }
  CUDA_CHECK(bench_nonzero_count(b->recvbuf, b->recvcap, b->wrong_dev, b->stream));
  CUDA_CHECK(
      cudaMemcpyAsync(&wrong, b->wrong_dev, sizeof(wrong), cudaMemcpyDeviceToHost, b->stream));
  CUDA_CHECK(cudaStreamSynchronize(b->stream));
  MPI_Allreduce(&wrong, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return (long long)all;
}

/* Warm-up, then the timed iterations enqueued back to back (or one graph
 * replay) between two events; returns this rank's milliseconds, or -1 when
 * graph capture failed on some rank (the lowest such rank said why). */
static double size_time(bench_t* b) {
  const options_t* o = b->o;
  data_prepare(b);
  CUDA_CHECK(cudaStreamSynchronize(b->stream));
  MPI_Barrier(MPI_COMM_WORLD);
  for (int it = 0; it < o->warmup; it++) iter_run(b);
  if (o->check) CUDA_CHECK(cudaMemsetAsync(b->recvbuf, 0, b->recvcap, b->stream));
  CUDA_CHECK(cudaStreamSynchronize(b->stream));
  b->host_s = 0;
  cudaGraphExec_t exec = NULL;
  if (o->graph) {
    char why[400] = "";
    int failed = graph_capture(b, &exec, why, sizeof(why)) != 0 ? world_rank : world_size, first;
    MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first < world_size) {
      if (failed == first)
        fprintf(stderr,
                "mpinccl_bench: -G 1: capturing the timed iterations in a CUDA graph failed on "
                "rank %d at size %zu: %s\n",
                world_rank, b->size, why);
      snprintf(b->error, sizeof(b->error), "CUDA graph capture failed on rank %d at size %zu",
               first, b->size);
      if (exec) cudaGraphExecDestroy(exec);
      return -1;
    }
    /* Uploaded before the timed replay, so that it times the iterations and
     * not the graph's first transfer to the device. */
    CUDA_CHECK(cudaGraphUpload(exec, b->stream));
    CUDA_CHECK(cudaStreamSynchronize(b->stream));
  }
  MPI_Barrier(MPI_COMM_WORLD); /* start together: skew is not communication */
  CUDA_CHECK(cudaEventRecord(b->start, b->stream));
  if (exec)
    CUDA_CHECK(cudaGraphLaunch(exec, b->stream));
  else
    for (int it = 0; it < o->iters; it++) iter_run(b);
  CUDA_CHECK(cudaEventRecord(b->stop, b->stream));
  CUDA_CHECK(cudaEventSynchronize(b->stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, b->start, b->stop));
  if (exec) CUDA_CHECK(cudaGraphExecDestroy(exec));
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(b->comm, ncclCommGetAsyncError(b->comm, &async));
  if (async != ncclSuccess && async != ncclInProgress) NCCL_CHECK(b->comm, async);
  return ms;
}

/* Host time of one iteration's calls enqueued on an idle stream: each of a
 * few iterations after a synchronization and a barrier, so that neither a
 * full command queue (the GPU behind the host in a back-to-back loop) nor a
 * late peer adds to it.  Run after the timed loop and its data check. */
static double idle_host_us(bench_t* b) {
  enum { IDLE_ITERS = 5 };
  double saved = b->host_s;
  b->host_s = 0;
  for (int it = 0; it < IDLE_ITERS; it++) {
    CUDA_CHECK(cudaStreamSynchronize(b->stream));
    MPI_Barrier(MPI_COMM_WORLD);
    iter_run(b);
  }
  CUDA_CHECK(cudaStreamSynchronize(b->stream));
  double us = b->host_s * 1e6 / IDLE_ITERS;
  b->host_s = saved;
  return us;
}

/* Times one size and fills its result (on rank 0); -1 when graph capture failed. */
static int size_run(bench_t* b, result_t* res) {
  const options_t* o = b->o;
  double ms = size_time(b);
  int failed = ms < 0, any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any_failed) return -1;
  double us = ms * 1e3 / o->iters;
  if (bench_op_round_trip(o->op)) us /= 2; /* one way: half a round trip */
  double host_us = b->host_s * 1e6 / o->iters, t[2] = {us, host_us}, tmax[2], host_sum = 0;
  MPI_Allreduce(t, tmax, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&host_us, &host_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  long long wrong = o->check ? data_check(b) : -1;
  /* Not with -G: host(us) is then the capture's, not comparable. */
  double idle_us = o->graph ? -1 : idle_host_us(b), idle_sum = 0;
  MPI_Allreduce(&idle_us, &idle_sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  double n = world_size, algbw = tmax[0] > 0 ? b->rank_bytes / (tmax[0] * 1e3) : 0;
  int all = o->op == OP_ALLTOALL || o->op == OP_RMAALLTOALL;
  double busbw = all ? algbw * (n - 1) / n : algbw;
  /* Bytes moved per second summed over the ranks (pingpong, put: one message in flight). */
  int one = bench_op_one_way(o->op);
  double moved = one ? algbw : n * busbw;
  /* Host means over the ranks that make calls (one-way operations: ranks 0 and 1). */
  double callers = one && world_size > 2 ? 2 : world_size;
  *res = (result_t){.bytes = b->size,
                    .edge = o->op == OP_HALO ? b->edge : 0,
                    .time_us = tmax[0],
                    .algbw = algbw,
                    .busbw = busbw,
                    .vs_copy = b->o->net ? (bench_net_floor_gbps(b) > 0 ? moved / bench_net_floor_gbps(b) : -1)
                                         : b->floors.copy_gbps > 0 ? moved / b->floors.copy_gbps : -1,
                    .vs_floor = b->floor_us > 0 ? tmax[0] / b->floor_us : -1,
                    .host_us = host_sum / callers,
                    .host_us_max = tmax[1],
                    .host_idle_us = idle_sum / callers,
                    .wrong = wrong};
  return 0;
}

/* ------------------------------------------------------------------- run -- */

static void comm_create(bench_t* b) {
#ifdef BENCH_WITH_NVIDIA_NCCL
  ncclUniqueId id;
  if (world_rank == 0) NCCL_CHECK(NULL, ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  NCCL_CHECK(NULL, ncclCommInitRank(&b->comm, world_size, id, world_rank));
#else
  NCCL_CHECK(NULL, mpincclCommInitMPI(&b->comm, MPI_COMM_WORLD, NULL));
#endif
}

/* ncclInvalidUsage (mpinccl: no registration yet) is noted and ignored. */
static void buffers_register(bench_t* b) {
  char* bufs[2] = {b->sendbuf, b->recvbuf};
  size_t caps[2] = {b->sendcap, b->recvcap};
  for (int i = 0; i < 2; i++) {
    ncclResult_t res = ncclCommRegister(b->comm, bufs[i], caps[i], &b->reg_handles[i]);
    if (res == ncclInvalidUsage) {
      b->reg_handles[i] = NULL;
      if (world_rank == 0 && i == 0)
        printf("# register  ncclCommRegister: ncclInvalidUsage (%s); running unregistered\n",
               ncclGetLastError(b->comm));
      continue;
    }
    NCCL_CHECK(b->comm, res);
  }
}

/* Buffers for the largest size (the plan at maxbytes has the largest offsets). */
static void buffers_create(bench_t* b) {
  int cap = world_size > HALO_DIRS ? world_size : HALO_DIRS;
  b->msgs = calloc((size_t)cap, sizeof(msg_t));
  if (b->msgs == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  plan_build(b, b->o->maxbytes); /* halo: after halo_setup (run) */
  b->sendcap = b->recvcap = SEGMENT_ALIGN;
  for (int i = 0; i < b->nmsgs; i++) {
    const msg_t* m = &b->msgs[i];
    if (m->send_off + m->bytes > b->sendcap) b->sendcap = m->send_off + m->bytes;
    if (m->recv_off + m->bytes > b->recvcap) b->recvcap = m->recv_off + m->bytes;
  }
  CUDA_CHECK(cudaMalloc((void**)&b->sendbuf, b->sendcap));
#if BENCH_HAVE_RMA
  if (bench_op_rma(b->o->op)) { /* the window: aligned as windows must be */
    NCCL_CHECK(b->comm, ncclMemAlloc((void**)&b->recvbuf, b->recvcap));
    NCCL_CHECK(b->comm, ncclCommWindowRegister(b->comm, b->recvbuf, b->recvcap, &b->win, NCCL_WIN_DEFAULT));
    b->all_peers = calloc((size_t)world_size, sizeof(*b->all_peers));
    if (b->all_peers == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int p = 0; p < world_size; p++) b->all_peers[p] = (ncclWaitSignalDesc_t){1, p, 0, 0};
  } else
#endif
    CUDA_CHECK(cudaMalloc((void**)&b->recvbuf, b->recvcap));
  CUDA_CHECK(cudaMalloc((void**)&b->wrong_dev, sizeof(*b->wrong_dev)));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&b->start));
  CUDA_CHECK(cudaEventCreate(&b->stop));
  if (b->o->reg) buffers_register(b);
}

static void buffers_destroy(bench_t* b) {
  for (int i = 0; i < 2; i++)
    if (b->reg_handles[i]) NCCL_CHECK(b->comm, ncclCommDeregister(b->comm, b->reg_handles[i]));
  CUDA_CHECK(cudaFree(b->sendbuf));
#if BENCH_HAVE_RMA
  if (bench_op_rma(b->o->op)) {
    CUDA_CHECK(cudaStreamSynchronize(b->stream));
    NCCL_CHECK(b->comm, ncclCommWindowDeregister(b->comm, b->win));
    NCCL_CHECK(b->comm, ncclMemFree(b->recvbuf));
    free(b->all_peers);
  } else
#endif
    CUDA_CHECK(cudaFree(b->recvbuf));
  CUDA_CHECK(cudaFree(b->wrong_dev));
  CUDA_CHECK(cudaEventDestroy(b->start));
  CUDA_CHECK(cudaEventDestroy(b->stop));
  CUDA_CHECK(cudaStreamDestroy(b->stream));
  free(b->msgs);
}

/* The sweep's size after size (times the step factor), 0 past maxbytes. */
static size_t size_next(const options_t* o, size_t size) {
  return size > o->maxbytes / (size_t)o->stepfactor ? 0 : size * (size_t)o->stepfactor;
}

/* Before the first size of a send/receive operation, at the largest size
 * (small messages may take the pair's inbox, which imports nothing): one
 * iteration per rank in which that rank posts last (2 ms after the others),
 * so that every rank has once been the side that posts second, which moves
 * the data and makes the one-time CUDA IPC imports of its peers' buffers.
 * Otherwise those imports land in the first timed loop whose roles differ
 * from its warm-up's (about 1 ms on two GPUs: docs/PERFORMANCE-HISTORY.md,
 * twenty-first session). */
static void roles_warmup(bench_t* b) {
  size_t largest = b->o->minbytes;
  for (size_t next; (next = size_next(b->o, largest)) != 0;) largest = next;
  if (!plan_build(b, largest)) return;
  data_prepare(b);
  for (int last = 0; last < world_size; last++) {
    CUDA_CHECK(cudaStreamSynchronize(b->stream));
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == last) usleep(2000);
    iter_run(b);
  }
  CUDA_CHECK(cudaStreamSynchronize(b->stream));
}

/* Every size from minbytes to maxbytes; returns the exit code. */
static int sizes_run(bench_t* b) {
  const options_t* o = b->o;
  long long wrong_sizes = 0;
  if (!bench_op_rma(o->op) && o->op != OP_BARRIER && world_size > 1) roles_warmup(b);
  for (size_t size = o->minbytes; size != 0 && size <= o->maxbytes && b->nresults < MAX_SIZES;
       size = size_next(o, size)) {
    if (!plan_build(b, size)) continue;
    result_t* r = &b->results[b->nresults];
    if (size_run(b, r) != 0) return 3;
    b->nresults++;
    wrong_sizes += r->wrong > 0;
    bench_report_row(b, r);
  }
  if (b->nresults == 0) { /* (all-to-all: every size below one byte per rank) */
    snprintf(b->error, sizeof(b->error), "no size from -b %zu to -e %zu suits -o %s with %d ranks", o->minbytes,
             o->maxbytes, bench_op_name(o->op), world_size);
    if (world_rank == 0) fprintf(stderr, "mpinccl_bench: %s\n", b->error);
    return 1;
  }
  if (wrong_sizes > 0) {
    snprintf(b->error, sizeof(b->error), "%lld size(s) received wrong bytes", wrong_sizes);
    if (world_rank == 0) fprintf(stderr, "mpinccl_bench: %s\n", b->error);
    return 1;
  }
  return 0;
}

static int run(const options_t* o, int ndev) {
  static bench_t bench; /* large: results */
  bench_t* b = &bench;
  b->o = o;
  b->rank = world_rank;
  b->nranks = world_size;
  topo_detect(ndev, &b->topo);
  /* The copy rate at 1 GiB whatever the sweep (halved only where memory is
   * short): at a small size the copy's launch, not the rate, would be timed. */
  bench_floors_measure(MPI_COMM_WORLD, (size_t)1 << 30, b->topo.pair_same_node, &b->floors);
  if (o->op == OP_BARRIER) bench_floors_barrier(MPI_COMM_WORLD, &b->floors);
  if (o->net) bench_net_measure(MPI_COMM_WORLD, (size_t)256 << 20, &b->net);
  floor_choose(b);
  if (o->op == OP_HALO) halo_setup(b);
  b->floors.barrier_comm_us = -1; /* (measured below, with the communicator) */
  bench_report_header(b);
  if (o->floors_only) return bench_report_json(b);
  comm_create(b);
  if (o->op == OP_BARRIER) { /* the same floor beside the library: does its presence cost? */
    bench_floors_t again = b->floors;
    bench_floors_barrier(MPI_COMM_WORLD, &again);
    b->floors.barrier_comm_us = again.barrier_batch_us;
  }
  buffers_create(b);
  bench_report_table_header(b);
  int rc = sizes_run(b);
  if (bench_report_json(b) != 0 && rc == 0) rc = 1;
  buffers_destroy(b);
  if (rc == 3) {
    NCCL_CHECK(b->comm, ncclCommAbort(b->comm));
  } else {
    NCCL_CHECK(b->comm, ncclCommFinalize(b->comm));
    NCCL_CHECK(b->comm, ncclCommDestroy(b->comm));
  }
  return rc;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  options_t o;
  int rc = bench_options_parse(argc, argv, world_rank, world_size, &o);
  int ndev = 0;
  if (rc == 0 && !gpus_everywhere(&ndev)) {
    if (world_rank == 0) fprintf(stderr, "%s\n", NO_GPU_MESSAGE);
    rc = 2;
  }
  if (rc == 0) rc = run(&o, ndev);
  MPI_Finalize();
  return rc < 0 ? 0 : rc;
}
