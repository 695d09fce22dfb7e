/*
 * bench_floors.cu - the floors of bench_floors.h: a single-stream copy rate
 * and two exchange latencies between ranks 0 and 1 of one host, measured
 * with the CUDA runtime, stream memory operations and MPI only.
 */
/* MPI's C API only: the deprecated C++ bindings warn and are not needed. */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <cuda.h> /* types and constants only: nothing links libcuda */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_floors.h"
#include "memops64.h"

enum { COPY_REPS = 5, EXCHANGE_ITERS = 1000, EXCHANGE_LOOPS = 3 };
/* Layout of each rank's exchange region. */
enum { REGION_BYTES = 4096, FLAG_OFF = 0, SEND_OFF = 256, RECV_OFF = 512 };

static int my_rank;

#define FLOORS_CUDA(call)                                                                \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                           \
      fprintf(stderr, "mpinccl_bench: rank %d: floors: %s failed: %s\n", my_rank, #call, \
              cudaGetErrorString(err_));                                                 \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
    }                                                                                    \
  } while (0)

#define FLOORS_CU(call)                                                                           \
  do {                                                                                            \
    CUresult res_ = (call);                                                                       \
    if (res_ != CUDA_SUCCESS) {                                                                   \
      fprintf(stderr, "mpinccl_bench: rank %d: floors: %s failed: CUresult %d\n", my_rank, #call, \
              (int)res_);                                                                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                               \
    }                                                                                             \
  } while (0)

/* The two ranks of the exchanges, each with its region and the peer's. */
typedef struct {
  MPI_Comm comm;
  int peer;
  char *mine, *theirs;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  memop64_fn write64, wait64;
  uint64_t seq; /* last flag value; both ranks count alike */
} pair_t;

static __global__ void copy8_kernel(uint64_t* d, const uint64_t* s) { *d = *s; }

static __global__ void swap8_kernel(uint64_t* d0, const uint64_t* s0, uint64_t* d1,
                                    const uint64_t* s1) {
  *d0 = *s0;
  *d1 = *s1;
}

/* ------------------------------------------------------------- copy rate -- */

static double copy_rate(size_t* bytes) {
  void *src = NULL, *dst = NULL;
  while (*bytes >= 1 &&
         (cudaMalloc(&src, *bytes) != cudaSuccess || cudaMalloc(&dst, *bytes) != cudaSuccess)) {
    (void)cudaGetLastError();
    if (src) cudaFree(src);
    src = NULL;
    *bytes /= 2;
  }
  if (dst == NULL) {
    fprintf(stderr, "mpinccl_bench: floors: no device memory for the copy rate\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  cudaStream_t s;
  cudaEvent_t a, b;
  FLOORS_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  FLOORS_CUDA(cudaEventCreate(&a));
  FLOORS_CUDA(cudaEventCreate(&b));
  FLOORS_CUDA(cudaMemsetAsync(src, 1, *bytes, s));
  FLOORS_CUDA(cudaMemcpyAsync(dst, src, *bytes, cudaMemcpyDeviceToDevice, s)); /* untimed */
  double best = 0;
  for (int r = 0; r < COPY_REPS; r++) {
    FLOORS_CUDA(cudaEventRecord(a, s));
    FLOORS_CUDA(cudaMemcpyAsync(dst, src, *bytes, cudaMemcpyDeviceToDevice, s));
    FLOORS_CUDA(cudaEventRecord(b, s));
    FLOORS_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    FLOORS_CUDA(cudaEventElapsedTime(&ms, a, b));
    double gbps = ms > 0 ? (double)*bytes / (ms * 1e6) : 0;
    if (gbps > best) best = gbps;
  }
  FLOORS_CUDA(cudaEventDestroy(a));
  FLOORS_CUDA(cudaEventDestroy(b));
  FLOORS_CUDA(cudaStreamDestroy(s));
  FLOORS_CUDA(cudaFree(src));
  FLOORS_CUDA(cudaFree(dst));
  return best;
}

/* ------------------------------------------------------------- exchanges -- */

static int load_memops(pair_t* p, char* why, size_t whylen) {
  if (bench_memops64_load(&p->write64, &p->wait64)) return 0;
  snprintf(why, whylen, "the CUDA driver lacks cuStreamWriteValue64/cuStreamWaitValue64");
  return -1;
}

/* Both ranks agree on ok (1) or not; returns the agreement. */
static int pair_agree(pair_t* p, int ok) {
  int theirs = 0;
  MPI_Sendrecv(&ok, 1, MPI_INT, p->peer, 7, &theirs, 1, MPI_INT, p->peer, 7, p->comm,
               MPI_STATUS_IGNORE);
  return ok && theirs;
}

/* Allocates and maps the regions; on failure says why and returns -1 on both ranks. */
static int pair_open(pair_t* p, char* why, size_t whylen) {
  int ok = load_memops(p, why, whylen) == 0;
  if (!pair_agree(p, ok)) {
    if (ok) snprintf(why, whylen, "rank %d lacks the stream memory operations", p->peer);
    return -1;
  }
  FLOORS_CUDA(cudaStreamCreateWithFlags(&p->stream, cudaStreamNonBlocking));
  FLOORS_CUDA(cudaEventCreate(&p->start));
  FLOORS_CUDA(cudaEventCreate(&p->stop));
  FLOORS_CUDA(cudaMalloc((void**)&p->mine, REGION_BYTES));
  FLOORS_CUDA(cudaMemset(p->mine, 0, REGION_BYTES));
  uint64_t send = 0x1111111111111111ULL * (uint64_t)(p->peer == 1 ? 1 : 2); /* rank + 1 */
  FLOORS_CUDA(cudaMemcpy(p->mine + SEND_OFF, &send, sizeof(send), cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t h, ph;
  cudaError_t err = cudaIpcGetMemHandle(&h, p->mine);
  ok = err == cudaSuccess;
  MPI_Sendrecv(&h, sizeof(h), MPI_BYTE, p->peer, 8, &ph, sizeof(ph), MPI_BYTE, p->peer, 8, p->comm,
               MPI_STATUS_IGNORE);
  if (pair_agree(p, ok)) {
    err = cudaIpcOpenMemHandle((void**)&p->theirs, ph, cudaIpcMemLazyEnablePeerAccess);
    ok = err == cudaSuccess;
    if (!ok) p->theirs = NULL;
    if (pair_agree(p, ok)) return 0;
  }
  (void)cudaGetLastError();
  if (err != cudaSuccess)
    snprintf(why, whylen, "CUDA IPC between ranks 0 and 1 failed: %s", cudaGetErrorString(err));
  else
    snprintf(why, whylen, "CUDA IPC between ranks 0 and 1 failed on rank %d", p->peer);
  if (p->theirs) cudaIpcCloseMemHandle(p->theirs);
  MPI_Barrier(p->comm); /* the peer may still hold its handle to our region */
  FLOORS_CUDA(cudaFree(p->mine));
  return -1;
}

static void pair_close(pair_t* p) {
  FLOORS_CUDA(cudaStreamSynchronize(p->stream));
  MPI_Barrier(p->comm); /* no memop of the peer still targets our region */
  FLOORS_CUDA(cudaIpcCloseMemHandle(p->theirs));
  MPI_Barrier(p->comm);
  FLOORS_CUDA(cudaFree(p->mine));
  FLOORS_CUDA(cudaEventDestroy(p->start));
  FLOORS_CUDA(cudaEventDestroy(p->stop));
  FLOORS_CUDA(cudaStreamDestroy(p->stream));
}

static void write_flag(pair_t* p, char* region) {
  FLOORS_CU(p->write64((CUstream)p->stream, (CUdeviceptr)(region + FLAG_OFF), p->seq, 0));
}

static void wait_flag(pair_t* p) {
  FLOORS_CU(p->wait64((CUstream)p->stream, (CUdeviceptr)(p->mine + FLAG_OFF), p->seq,
                      CU_STREAM_WAIT_VALUE_GEQ));
}

enum { FLAG_ONLY, DELEGATED, ENGINE };

/* One exchange of the given kind; rank 0 is the delegate when delegated. */
static void exchange(pair_t* p, int kind, int rank) {
  ++p->seq;
  if (kind == FLAG_ONLY || (kind == DELEGATED && rank == 1)) {
    write_flag(p, p->theirs);
    wait_flag(p);
  } else if (kind == ENGINE) { /* both copy 8 bytes into the peer, then signal */
    copy8_kernel<<<1, 1, 0, p->stream>>>((uint64_t*)(p->theirs + RECV_OFF),
                                         (const uint64_t*)(p->mine + SEND_OFF));
    FLOORS_CUDA(cudaGetLastError());
    write_flag(p, p->theirs);
    wait_flag(p);
  } else {
    wait_flag(p);
    swap8_kernel<<<1, 1, 0, p->stream>>>(
        (uint64_t*)(p->theirs + RECV_OFF), (const uint64_t*)(p->mine + SEND_OFF),
        (uint64_t*)(p->mine + RECV_OFF), (const uint64_t*)(p->theirs + SEND_OFF));
    FLOORS_CUDA(cudaGetLastError());
    write_flag(p, p->theirs);
  }
}

/* Microseconds per exchange: the slower rank's, best of EXCHANGE_LOOPS. */
static double exchange_floor(pair_t* p, int kind, int rank) {
  /* The engine exchange switches contexts every time without MPS: fewer. */
  int iters = kind == ENGINE ? EXCHANGE_ITERS / 5 : EXCHANGE_ITERS;
  double best = -1;
  for (int loop = 0; loop <= EXCHANGE_LOOPS; loop++) { /* loop 0 is untimed */
    FLOORS_CUDA(cudaStreamSynchronize(p->stream));
    MPI_Barrier(p->comm);
    FLOORS_CUDA(cudaEventRecord(p->start, p->stream));
    for (int i = 0; i < iters; i++) exchange(p, kind, rank);
    FLOORS_CUDA(cudaEventRecord(p->stop, p->stream));
    FLOORS_CUDA(cudaEventSynchronize(p->stop));
    float ms = 0;
    FLOORS_CUDA(cudaEventElapsedTime(&ms, p->start, p->stop));
    double mine = ms * 1e3 / iters, theirs = 0;
    MPI_Sendrecv(&mine, 1, MPI_DOUBLE, p->peer, 9, &theirs, 1, MPI_DOUBLE, p->peer, 9, p->comm,
                 MPI_STATUS_IGNORE);
    double t = mine > theirs ? mine : theirs;
    if (loop > 0 && (best < 0 || t < best)) best = t;
  }
  return best;
}

/* Whether the delegated loop, run on cleared receive areas, left each holding
 * the peer's 8 bytes (both ranks learn both answers). */
static int delegated_delivered(pair_t* p, int rank) {
  uint64_t got = 0, want = 0x1111111111111111ULL * (uint64_t)(p->peer + 1);
  FLOORS_CUDA(cudaStreamSynchronize(p->stream));
  FLOORS_CUDA(cudaMemcpy(&got, p->mine + RECV_OFF, sizeof(got), cudaMemcpyDeviceToHost));
  int ok = got == want;
  if (!ok)
    fprintf(stderr,
            "mpinccl_bench: rank %d: floors: the delegated exchange delivered %#llx, not %#llx: "
            "its floor is not used\n",
            rank, (unsigned long long)got, (unsigned long long)want);
  return pair_agree(p, ok);
}

/* Ranks 0 and 1 only: the exchange floors, or a reason why not. */
static void exchange_floors(MPI_Comm comm, int rank, bench_floors_t* f) {
  pair_t p;
  memset(&p, 0, sizeof(p));
  p.comm = comm;
  p.peer = rank ^ 1;
  if (pair_open(&p, f->na_reason, sizeof(f->na_reason)) != 0) return;
  f->flag_us = exchange_floor(&p, FLAG_ONLY, rank);
  /* The receive areas are still zero here: only the delegated loop writes them. */
  double delegated = exchange_floor(&p, DELEGATED, rank);
  if (delegated_delivered(&p, rank)) f->delegated_us = delegated;
  f->engine_us = exchange_floor(&p, ENGINE, rank);
  pair_close(&p);
}

extern "C" void bench_floors_measure(MPI_Comm comm, size_t copy_bytes, int pair_ok,
                                     bench_floors_t* out) {
  int size;
  MPI_Comm_rank(comm, &my_rank);
  MPI_Comm_size(comm, &size);
  bench_floors_t f;
  memset(&f, 0, sizeof(f));
  f.copy_bytes = copy_bytes;
  f.copy_reps = COPY_REPS;
  f.exchange_iters = EXCHANGE_ITERS;
  f.flag_us = f.delegated_us = f.engine_us = f.barrier_us = f.barrier_batch_us = -1;
  FLOORS_CUDA(cudaDeviceSynchronize());
  MPI_Barrier(comm);
  if (my_rank == 0) f.copy_gbps = copy_rate(&f.copy_bytes);
  MPI_Barrier(comm);
  if (size < 2)
    snprintf(f.na_reason, sizeof(f.na_reason), "only 1 rank");
  else if (!pair_ok)
    snprintf(f.na_reason, sizeof(f.na_reason), "ranks 0 and 1 are on different hosts");
  else if (my_rank < 2) {
    MPI_Comm pair;
    MPI_Comm_split(comm, 0, my_rank, &pair);
    exchange_floors(pair, my_rank, &f);
    MPI_Comm_free(&pair);
  } else {
    MPI_Comm none;
    MPI_Comm_split(comm, MPI_UNDEFINED, my_rank, &none);
  }
  MPI_Bcast(&f, sizeof(f), MPI_BYTE, 0, comm);
  *out = f;
}

/* --------------------------------------------------------------- barrier -- */

enum { BARRIER_ITERS = 200 };

/* Barrier seq: every rank's flag [me] written, then every own flag waited
 * for, as separate memory operations or (batch) as one batch of them. */
static void barrier_issue(pair_t* p, char** all, int n, batch_memop_fn batch, CUstreamBatchMemOpParams* ops) {
  if (batch == NULL) {
    for (int r = 0; r < n; r++)
      FLOORS_CU(p->write64((CUstream)p->stream, (CUdeviceptr)(all[r] + 8 * my_rank), p->seq, 0));
    for (int r = 0; r < n; r++)
      FLOORS_CU(p->wait64((CUstream)p->stream, (CUdeviceptr)(p->mine + 8 * r), p->seq, CU_STREAM_WAIT_VALUE_GEQ));
    return;
  }
  memset(ops, 0, 2 * (size_t)n * sizeof(*ops));
  for (int r = 0; r < n; r++) {
    ops[r].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[r].writeValue.address = (CUdeviceptr)(all[r] + 8 * my_rank);
    ops[r].writeValue.value64 = p->seq;
    ops[n + r].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    ops[n + r].waitValue.address = (CUdeviceptr)(p->mine + 8 * r);
    ops[n + r].waitValue.value64 = p->seq;
    ops[n + r].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  }
  FLOORS_CU(batch((CUstream)p->stream, 2 * (unsigned)n, ops, 0));
}

/* Best time per barrier over the loops (the slowest rank's), in us. */
static double barrier_time(MPI_Comm comm, pair_t* p, char** all, int n, batch_memop_fn batch,
                           CUstreamBatchMemOpParams* ops) {
  double best = -1;
  for (int loop = 0; loop <= EXCHANGE_LOOPS; loop++) { /* loop 0 is untimed */
    FLOORS_CUDA(cudaStreamSynchronize(p->stream));
    MPI_Barrier(comm);
    FLOORS_CUDA(cudaEventRecord(p->start, p->stream));
    for (int i = 0; i < BARRIER_ITERS; i++) {
      ++p->seq;
      barrier_issue(p, all, n, batch, ops);
    }
    FLOORS_CUDA(cudaEventRecord(p->stop, p->stream));
    FLOORS_CUDA(cudaEventSynchronize(p->stop));
    float ms = 0;
    FLOORS_CUDA(cudaEventElapsedTime(&ms, p->start, p->stop));
    double t = ms * 1e3 / BARRIER_ITERS;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (loop > 0 && (best < 0 || t < best)) best = t;
  }
  return best;
}

/* Maps every rank's flag region (NULL where CUDA IPC failed); 1 when all did, on every rank. */
static int barrier_open(MPI_Comm comm, int n, char* mine, char** all) {
  cudaIpcMemHandle_t h;
  cudaIpcMemHandle_t* hs = (cudaIpcMemHandle_t*)calloc((size_t)n, sizeof(h));
  if (hs == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  int ok = cudaIpcGetMemHandle(&h, mine) == cudaSuccess;
  if (!ok) memset(&h, 0, sizeof(h));
  MPI_Allgather(&h, sizeof(h), MPI_BYTE, hs, sizeof(h), MPI_BYTE, comm);
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  for (int r = 0; ok && r < n; r++) {
    if (r == my_rank) {
      all[r] = mine;
    } else if (cudaIpcOpenMemHandle((void**)&all[r], hs[r], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      all[r] = NULL;
      ok = 0;
    }
  }
  free(hs);
  (void)cudaGetLastError();
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  return ok;
}

extern "C" void bench_floors_barrier(MPI_Comm comm, bench_floors_t* out) {
  int n, local;
  MPI_Comm_rank(comm, &my_rank);
  MPI_Comm_size(comm, &n);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  out->barrier_ranks = n;
  out->barrier_us = out->barrier_batch_us = -1;
  pair_t p; /* for its memops, stream and events */
  memset(&p, 0, sizeof(p));
  char why[8];
  batch_memop_fn batch = NULL;
  int ok = local == n && load_memops(&p, why, sizeof(why)) == 0;
  /* A batch holds fewer than 256 operations: n writes and n waits. */
  int batched = bench_batch_memop_load(&batch) && 2 * n < 256;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &batched, 1, MPI_INT, MPI_MIN, comm);
  if (!ok) return;
  char** all = (char**)calloc((size_t)n, sizeof(char*));
  CUstreamBatchMemOpParams* ops = (CUstreamBatchMemOpParams*)calloc(2 * (size_t)n, sizeof(*ops));
  if (all == NULL || ops == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  FLOORS_CUDA(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking));
  FLOORS_CUDA(cudaEventCreate(&p.start));
  FLOORS_CUDA(cudaEventCreate(&p.stop));
  FLOORS_CUDA(cudaMalloc((void**)&p.mine, (size_t)n * 8 < (size_t)REGION_BYTES ? (size_t)REGION_BYTES : (size_t)n * 8));
  FLOORS_CUDA(cudaMemset(p.mine, 0, (size_t)n * 8));
  FLOORS_CUDA(cudaDeviceSynchronize());
  double best = -1, best_batch = -1;
  if (barrier_open(comm, n, p.mine, all)) {
    best = barrier_time(comm, &p, all, n, NULL, ops);
    if (batched) best_batch = barrier_time(comm, &p, all, n, batch, ops);
  }
  FLOORS_CUDA(cudaStreamSynchronize(p.stream));
  MPI_Barrier(comm); /* no memop of a peer still targets our region */
  for (int r = 0; r < n; r++)
    if (all[r] && r != my_rank) FLOORS_CUDA(cudaIpcCloseMemHandle(all[r]));
  MPI_Barrier(comm);
  FLOORS_CUDA(cudaFree(p.mine));
  FLOORS_CUDA(cudaEventDestroy(p.start));
  FLOORS_CUDA(cudaEventDestroy(p.stop));
  FLOORS_CUDA(cudaStreamDestroy(p.stream));
  free(all);
  free(ops);
  out->barrier_us = best;
  out->barrier_batch_us = best_batch;
}
