/*
 * barriers.cu - which shape of barrier made of stream memory operations
 * costs what among the processes of one host that share a GPU, measured
 * with plain CUDA and MPI (no mpinccl).  The one-sided barrier of the API
 * (every rank signals every rank, then waits for every rank) needs one
 * write per peer, since each signal counts per (source, target); the other
 * shapes say what fewer writes would give.  Each rank's operations of one
 * barrier are one cuStreamBatchMemOp.  Shapes:
 *   flags    ranks 0 and 1 only (the others wait): one flag each way, the
 *            two-rank flag-only exchange that bench/ reports as its floor
 *   per-pair every rank writes its count into its slot in every peer's
 *            region, then waits for every peer's slot in its own (the
 *            layout of mpinccl's signals)
 *   own-word every rank writes one word of its own region, then waits for
 *            every peer's word (one write per rank)
 *   central  every rank but 0 writes its slot in rank 0's region and waits
 *            for rank 0's release word; rank 0 waits for every slot, then
 *            writes the release word
 *   proxy    as central, with the words in shared host memory and a thread
 *            of rank 0's process (not its stream) releasing the others
 *   spread   as per-pair, with each (source, target) word in a 2 MiB
 *            allocation of its own made by the source, 20 KiB in (the
 *            layout of mpinccl's pair blocks, whose signals live there)
 *   packed   per-pair counts, 32 bits each, two targets' to a 64-bit word
 *            of the source's region: half as many writes, each target
 *            waiting with a 32-bit wait on its half (a layout mpinccl's
 *            signals could take: counts of one source per target, compared
 *            cyclically)
 *   dissem   a dissemination barrier: in round j (of ceil(log2(ranks))),
 *            every rank writes round j's word in the region of rank
 *            me + 2^j and waits for its own round-j word, which only rank
 *            me - 2^j writes; one write and one wait a round
 *   dis+pair the per-pair writes first (the counts the API's signals
 *            need), then dissem's rounds, which alone are waited for: the
 *            shape the library's barrier could take if it recognized one
 *            (a wait for round j's word orders after the writer's earlier
 *            writes, which the writes' memory barriers publish first)
 * Words are 64-bit counts in device memory mapped through CUDA IPC (proxy:
 * host memory registered with CUDA), waited for with GEQ.  Reported: time
 * per barrier (the slowest rank's loop / barriers, best of 3 loops).
 *
 * Usage: mpirun -np N bench/mpinccl_barriers [-n ITERS]   (N <= 64, one host)
 */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <cuda.h> /* types and constants only: nothing links libcuda */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "memops64.h"

namespace {

/* words of a region: one per source rank, the release word, one per dissemination round */
enum { STRIDE = 64, MOST_RANKS = 64, RELEASE = MOST_RANKS, ROUND0 = MOST_RANKS + 1, MOST_ROUNDS = 6 };
enum { WORDS = ROUND0 + MOST_ROUNDS, HOST_BYTES = 8192 };
static_assert(STRIDE * WORDS <= HOST_BYTES, "the shared host words fit their mapping");
static_assert(1 << MOST_ROUNDS >= MOST_RANKS, "rounds enough for the most ranks");
enum { FLAGS, PER_PAIR, OWN_WORD, CENTRAL, PROXY, SPREAD, PACKED, DISSEM, DISSEM_PAIRS, SHAPES };
const char* const shape_name[SHAPES] = {"flags",  "per-pair", "own-word", "central", "proxy",
                                        "spread", "packed",   "dissem",   "dis+pair"};
/* packed: the words after the STRIDE-spaced ones, 8 bytes apart, one per two targets */
enum { PACKED_OFF = STRIDE * WORDS, REGION_BYTES = PACKED_OFF + 8 * (MOST_RANKS / 2) };
enum { SPREAD_BYTES = 2 << 20, SPREAD_OFFSET = 20480 };

int me, nranks;

#define CHECK_CUDA(call)                                                                           \
  do {                                                                                             \
    cudaError_t err_ = (call);                                                                     \
    if (err_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "mpinccl_barriers: rank %d: %s: %s\n", me, #call, cudaGetErrorString(err_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                \
    }                                                                                              \
  } while (0)

struct ctx_t {
  cudaStream_t stream;
  batch_memop_fn batch;
  char* region[MOST_RANKS]; /* every rank's device words, mapped (own: region[me]) */
  char* out[MOST_RANKS];    /* spread: this rank's block for its word to each target */
  char* in[MOST_RANKS];     /* spread: each source's block for its word to this rank, mapped */
  char* host;               /* shared host words (proxy), host view */
  CUdeviceptr host_dev;     /* and device view */
  const char* shm_name;
  CUstreamBatchMemOpParams ops[2 * MOST_RANKS];
  int nops;
};

CUdeviceptr word(const ctx_t* c, int owner, int i) { return (CUdeviceptr)(c->region[owner] + STRIDE * i); }
/* packed: the 32-bit half of source's word that holds its count for target */
CUdeviceptr packed_half(const ctx_t* c, int source, int target) {
  return (CUdeviceptr)(c->region[source] + PACKED_OFF + 8 * (target / 2) + 4 * (target % 2));
}
CUdeviceptr host_word(const ctx_t* c, int i) { return c->host_dev + STRIDE * i; }
volatile uint64_t* host_view(const ctx_t* c, int i) { return (volatile uint64_t*)(c->host + STRIDE * i); }

void add(ctx_t* c, CUdeviceptr addr, uint64_t value, int wait) {
  CUstreamBatchMemOpParams* op = &c->ops[c->nops++];
  memset(op, 0, sizeof(*op));
  if (wait == 32) {
    op->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    op->waitValue.address = addr;
    op->waitValue.value = (cuuint32_t)value;
    op->waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ; /* cyclic: (int32_t)(*addr - value) >= 0 */
  } else if (wait) {
    op->waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_64;
    op->waitValue.address = addr;
    op->waitValue.value64 = value;
    op->waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  } else {
    op->writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op->writeValue.address = addr;
    op->writeValue.value64 = value;
  }
}

/* dissem's rounds: round j's word in the region of rank me + 2^j, then the wait for ours. */
int rounds() {
  int j = 0;
  while ((1 << j) < nranks) j++;
  return j;
}
void dissemination(ctx_t* c, uint64_t k) {
  for (int j = 0; j < rounds(); j++) {
    add(c, word(c, (me + (1 << j)) % nranks, ROUND0 + j), k, 0);
    add(c, word(c, me, ROUND0 + j), k, 1);
  }
}

/* Barrier number k of a shape, on this rank's stream. */
void barrier(ctx_t* c, int shape, uint64_t k) {
  c->nops = 0;
  switch (shape) {
    case FLAGS:
      if (me > 1) return;
      add(c, word(c, 1 - me, me), k, 0);
      add(c, word(c, me, 1 - me), k, 1);
      break;
    case PER_PAIR:
      for (int r = 0; r < nranks; r++)
        if (r != me) add(c, word(c, r, me), k, 0);
      for (int r = 0; r < nranks; r++)
        if (r != me) add(c, word(c, me, r), k, 1);
      break;
    case OWN_WORD:
      add(c, word(c, me, me), k, 0);
      for (int r = 0; r < nranks; r++)
        if (r != me) add(c, word(c, r, r), k, 1);
      break;
    case CENTRAL:
      if (me == 0) {
        for (int r = 1; r < nranks; r++) add(c, word(c, 0, r), k, 1);
        add(c, word(c, 0, RELEASE), k, 0);
      } else {
        add(c, word(c, 0, me), k, 0);
        add(c, word(c, 0, RELEASE), k, 1);
      }
      break;
    case PROXY:
      add(c, host_word(c, me), k, 0);
      add(c, host_word(c, RELEASE), k, 1);
      break;
    case SPREAD:
      for (int r = 0; r < nranks; r++)
        if (r != me) add(c, (CUdeviceptr)(c->out[r] + SPREAD_OFFSET), k, 0);
      for (int r = 0; r < nranks; r++)
        if (r != me) add(c, (CUdeviceptr)(c->in[r] + SPREAD_OFFSET), k, 1);
      break;
    case PACKED:
      for (int t = 0; t < nranks; t += 2) add(c, packed_half(c, me, t), (k & 0xffffffffu) * 0x100000001ull, 0);
      for (int r = 0; r < nranks; r++)
        if (r != me) add(c, packed_half(c, r, me), k, 32);
      break;
    case DISSEM: dissemination(c, k); break;
    case DISSEM_PAIRS:
      for (int r = 0; r < nranks; r++)
        if (r != me) add(c, word(c, r, me), k, 0);
      dissemination(c, k);
      break;
  }
  if (c->batch((CUstream)c->stream, (unsigned)c->nops, c->ops, 0) != CUDA_SUCCESS) {
    fprintf(stderr, "mpinccl_barriers: rank %d: cuStreamBatchMemOp failed\n", me);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* proxy: a thread of rank 0 releases barrier k once every rank's word says k. */
struct proxy_t {
  const ctx_t* c;
  uint64_t from, to; /* releases from + 1 .. to */
};

void* proxy_loop(void* arg) {
  const proxy_t* p = (const proxy_t*)arg;
  for (uint64_t k = p->from + 1; k <= p->to; k++) {
    for (int r = 0; r < nranks; r++)
      while (*host_view(p->c, r) < k) {}
    __atomic_store_n((uint64_t*)host_view(p->c, RELEASE), k, __ATOMIC_RELEASE);
  }
  return NULL;
}

double now_s() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Best per-barrier time (us) of 3 loops of iters, the slowest rank's. */
double measure(ctx_t* c, int shape, int iters, uint64_t* count) {
  double best = -1;
  for (int loop = 0; loop < 4; loop++) { /* the first untimed */
    pthread_t thread;
    proxy_t p = {c, *count, *count + (uint64_t)iters};
    if (shape == PROXY && me == 0 && pthread_create(&thread, NULL, proxy_loop, &p) != 0) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now_s();
    for (int i = 0; i < iters; i++) barrier(c, shape, ++*count);
    CHECK_CUDA(cudaStreamSynchronize(c->stream));
    double us = (now_s() - t0) * 1e6 / iters, slowest = 0;
    if (shape == PROXY && me == 0) pthread_join(thread, NULL);
    MPI_Allreduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (loop > 0 && (best < 0 || slowest < best)) best = slowest;
  }
  return best;
}

/* Device words of every rank mapped into every rank; shared host words. */
void setup(ctx_t* c) {
  size_t bytes = REGION_BYTES;
  CHECK_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaMalloc((void**)&c->region[me], bytes));
  CHECK_CUDA(cudaMemset(c->region[me], 0, bytes));
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaIpcMemHandle_t mine, all[MOST_RANKS];
  CHECK_CUDA(cudaIpcGetMemHandle(&mine, c->region[me]));
  MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, all, sizeof(mine), MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < nranks; r++)
    if (r != me) CHECK_CUDA(cudaIpcOpenMemHandle((void**)&c->region[r], all[r], cudaIpcMemLazyEnablePeerAccess));
  /* spread: block [me -> t] made here, handles gathered as [source][target] */
  cudaIpcMemHandle_t* handles = (cudaIpcMemHandle_t*)calloc((size_t)nranks * nranks, sizeof(*handles));
  if (handles == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int t = 0; t < nranks; t++) {
    if (t == me) continue;
    CHECK_CUDA(cudaMalloc((void**)&c->out[t], SPREAD_BYTES));
    CHECK_CUDA(cudaMemset(c->out[t], 0, SPREAD_BYTES));
    CHECK_CUDA(cudaIpcGetMemHandle(&handles[me * nranks + t], c->out[t]));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, handles, (int)(nranks * sizeof(*handles)), MPI_BYTE,
                MPI_COMM_WORLD);
  for (int r = 0; r < nranks; r++)
    if (r != me)
      CHECK_CUDA(cudaIpcOpenMemHandle((void**)&c->in[r], handles[r * nranks + me], cudaIpcMemLazyEnablePeerAccess));
  free(handles);
  static char name[64];
  int pid = (int)getpid();
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  snprintf(name, sizeof(name), "/mpinccl_barriers.%d", pid);
  c->shm_name = name;
  int fd = me == 0 ? shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600) : -1;
  if (me == 0 && (fd < 0 || ftruncate(fd, HOST_BYTES) != 0)) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me != 0) fd = shm_open(name, O_RDWR, 0600);
  c->host = fd < 0 ? NULL : (char*)mmap(NULL, HOST_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd < 0 || c->host == MAP_FAILED) MPI_Abort(MPI_COMM_WORLD, 1);
  close(fd);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) shm_unlink(name);
  void* dev = NULL;
  CHECK_CUDA(cudaHostRegister(c->host, HOST_BYTES, cudaHostRegisterMapped | cudaHostRegisterPortable));
  CHECK_CUDA(cudaHostGetDevicePointer(&dev, c->host, 0));
  c->host_dev = (CUdeviceptr)dev;
}

void teardown(ctx_t* c) {
  MPI_Barrier(MPI_COMM_WORLD); /* no rank's stream reads another's words any more */
  for (int r = 0; r < nranks; r++)
    if (r != me) CHECK_CUDA(cudaIpcCloseMemHandle(c->region[r]));
  for (int r = 0; r < nranks; r++)
    if (r != me) CHECK_CUDA(cudaIpcCloseMemHandle(c->in[r]));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_CUDA(cudaFree(c->region[me]));
  for (int t = 0; t < nranks; t++)
    if (t != me) CHECK_CUDA(cudaFree(c->out[t]));
  CHECK_CUDA(cudaHostUnregister(c->host));
  munmap(c->host, HOST_BYTES);
  CHECK_CUDA(cudaStreamDestroy(c->stream));
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  int iters = 500, opt;
  while ((opt = getopt(argc, argv, "n:")) != -1)
    if (opt == 'n' && atoi(optarg) > 0)
      iters = atoi(optarg);
    else {
      if (me == 0) fprintf(stderr, "usage: mpinccl_barriers [-n ITERS]\n");
      MPI_Finalize();
      return 2;
    }
  int devices = 0, mps = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (me == 0) fprintf(stderr, "mpinccl_barriers: no CUDA device\n");
    MPI_Finalize();
    return 77;
  }
  if (nranks < 2 || nranks > MOST_RANKS) {
    if (me == 0) fprintf(stderr, "mpinccl_barriers: needs 2 to %d ranks on one host\n", MOST_RANKS);
    MPI_Finalize();
    return 2;
  }
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
  ctx_t c;
  memset(&c, 0, sizeof(c));
  if (!bench_batch_memop_load(&c.batch)) {
    if (me == 0) fprintf(stderr, "mpinccl_barriers: the driver lacks cuStreamBatchMemOp\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  setup(&c);
  uint64_t count[SHAPES] = {0};
  double us[SHAPES];
  for (int s = 0; s < SHAPES; s++) us[s] = measure(&c, s, iters, &count[s]);
  if (me == 0) {
    printf("# %d ranks on GPU 0, MPS %s, %d barriers a loop, best of 3 loops\n", nranks, mps ? "on" : "off", iters);
    printf("# shape      writes/rank   us/barrier   vs flags\n");
    for (int s = 0; s < SHAPES; s++) {
      const char* writes = s == PER_PAIR || s == SPREAD ? "ranks - 1"
                           : s == PACKED                ? "ranks / 2"
                           : s == DISSEM                ? "log2 ranks"
                           : s == DISSEM_PAIRS          ? "ranks-1+log2"
                                                        : "1";
      printf("  %-10s %-12s %10.2f %10.2f\n", shape_name[s], writes, us[s], us[s] / us[FLAGS]);
    }
  }
  teardown(&c);
  MPI_Finalize();
  return 0;
}
