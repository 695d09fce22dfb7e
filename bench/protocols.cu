/*
 * protocols.cu - which shape of exchange costs what on a GPU that two
 * processes share, measured with plain CUDA and MPI (no mpinccl).
 *
 * Two ranks on one host, each with a kernel that stands for the
 * application's work (it spins for -c microseconds), then an exchange of
 * -b bytes each way with the other rank, -n times.  The exchanges:
 *   compute    none: the kernels alone
 *   flags      one flag each way (write the peer's, wait for one's own)
 *   push1      one hop: copy into the peer's receive buffer (two, used in
 *              turn), then the flag
 *   push1+ce   one hop into a staging buffer of the peer's (two, used in
 *              turn), the flag, then the peer copies the data into its
 *              receive buffer by the copy engine: the shape a receive into
 *              the caller's buffer takes in one hop (mpinccl's inbox)
 *   push1+kernel  the same, copied out by a kernel
 *   push2      two hops: "my receive buffer is free", wait for the peer's,
 *              copy into it, "done", wait for the peer's "done"
 *   pull       "my send buffer is ready", wait for the peer's, copy out of
 *              it, "consumed", wait for the peer's "consumed"
 *   delegated  rank 0 moves both directions: rank 1 says "ready" and waits
 *              for "done"; rank 0 waits for "ready", copies both ways,
 *              writes "done"
 * Copies are cudaMemcpyAsync (copy engine), or a kernel with -k.  Flags are
 * 64-bit words in device memory that the peer maps through CUDA IPC,
 * written and waited for with stream memory operations.  Without MPS each
 * process's kernels wait for the GPU's time slice: the figures say how many
 * hand-overs between the processes each shape costs per iteration.
 *
 * Usage: mpirun -np 2 bench/mpinccl_protocols [-b BYTES] [-c US] [-n ITERS] [-k]
 */
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <cuda.h> /* types and constants only: nothing links libcuda */
#include <cuda_runtime.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memops64.h"

namespace {

int my_rank;

#define CHECK_CUDA(call)                                                                              \
  do {                                                                                                \
    cudaError_t err_ = (call);                                                                        \
    if (err_ != cudaSuccess) {                                                                        \
      fprintf(stderr, "mpinccl_protocols: rank %d: %s: %s\n", my_rank, #call, cudaGetErrorString(err_)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                   \
    }                                                                                                 \
  } while (0)

#define CHECK_CU(call)                                                                           \
  do {                                                                                           \
    CUresult res_ = (call);                                                                      \
    if (res_ != CUDA_SUCCESS) {                                                                  \
      fprintf(stderr, "mpinccl_protocols: rank %d: %s: CUresult %d\n", my_rank, #call, (int)res_); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                              \
    }                                                                                            \
  } while (0)

enum { F_DATA = 0, F_READY = 1, F_DONE = 2, FLAG_STRIDE = 64, FLAGS_BYTES = 4096 };
enum { COMPUTE, FLAGS, PUSH1, PUSH1_OUT_CE, PUSH1_OUT_KERNEL, PUSH2, PULL, DELEGATED, SHAPES };
const char* const shape_name[SHAPES] = {"compute",      "flags", "push1", "push1+ce",
                                        "push1+kernel", "push2", "pull",  "delegated"};

/* A rank's region, which the peer maps: flags, its send buffer, three
 * receive buffers (push1+ce and push1+kernel stage in the last two). */
struct region_t {
  char* base;
  size_t bytes;
  uint64_t* flag(int f) const { return (uint64_t*)(base + FLAG_STRIDE * f); }
  char* send() const { return base + FLAGS_BYTES; }
  char* recv(int k) const { return base + FLAGS_BYTES + (1 + (size_t)k) * bytes; }
};

struct ctx_t {
  int peer;
  size_t bytes;
  double compute_us;
  int kernel_copies;
  cudaStream_t stream;
  region_t mine, theirs;
  memop64_fn write64, wait64;
  uint64_t seq;
};

__global__ void spin_kernel(long long ns) {
  long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= ns) break;
  }
}

__global__ void copy_kernel(const uint4* src, uint4* dst, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

void copy_by(ctx_t* c, const char* src, char* dst, int kernel) {
  if (!kernel) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, c->bytes, cudaMemcpyDeviceToDevice, c->stream));
    return;
  }
  size_t n = c->bytes / sizeof(uint4); /* -b is a multiple of 16 */
  int blocks = (int)((n + 511) / 512 < 64 ? (n + 511) / 512 : 64);
  copy_kernel<<<blocks > 0 ? blocks : 1, 512, 0, c->stream>>>((const uint4*)src, (uint4*)dst, n);
  CHECK_CUDA(cudaGetLastError());
}

void copy(ctx_t* c, const char* src, char* dst) { copy_by(c, src, dst, c->kernel_copies); }

void write_peer(ctx_t* c, int f) {
  CHECK_CU(c->write64((CUstream)c->stream, (CUdeviceptr)c->theirs.flag(f), c->seq, 0));
}

void wait_own(ctx_t* c, int f) {
  CHECK_CU(c->wait64((CUstream)c->stream, (CUdeviceptr)c->mine.flag(f), c->seq, CU_STREAM_WAIT_VALUE_GEQ));
}

/* One iteration of a shape on this rank's stream. */
void iteration(ctx_t* c, int shape) {
  ++c->seq;
  spin_kernel<<<1, 32, 0, c->stream>>>((long long)(c->compute_us * 1000));
  switch (shape) {
    case COMPUTE: break;
    case FLAGS:
      write_peer(c, F_DATA);
      wait_own(c, F_DATA);
      break;
    case PUSH1:
      copy(c, c->mine.send(), c->theirs.recv((int)(c->seq % 2)));
      write_peer(c, F_DATA);
      wait_own(c, F_DATA);
      break;
    case PUSH1_OUT_CE:
    case PUSH1_OUT_KERNEL:
      copy(c, c->mine.send(), c->theirs.recv(1 + (int)(c->seq % 2)));
      write_peer(c, F_DATA);
      wait_own(c, F_DATA);
      copy_by(c, c->mine.recv(1 + (int)(c->seq % 2)), c->mine.recv(0), shape == PUSH1_OUT_KERNEL);
      break;
    case PUSH2: /* F_READY: my receive buffer is free; F_DONE: yours is filled */
    case PULL:  /* F_READY: my send buffer is ready; F_DONE: I took yours */
      write_peer(c, F_READY);
      wait_own(c, F_READY);
      if (shape == PUSH2)
        copy(c, c->mine.send(), c->theirs.recv(0));
      else
        copy(c, c->theirs.send(), c->mine.recv(0));
      write_peer(c, F_DONE);
      wait_own(c, F_DONE);
      break;
    case DELEGATED:
      if (my_rank == 1) {
        write_peer(c, F_READY);
        wait_own(c, F_DONE);
      } else {
        wait_own(c, F_READY);
        copy(c, c->mine.send(), c->theirs.recv(0));
        copy(c, c->theirs.send(), c->mine.recv(0));
        write_peer(c, F_DONE);
      }
      break;
  }
}

/* Microseconds per iteration of shape: the slower rank's, best of three loops. */
double measure(ctx_t* c, int shape, int iters) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  double best = -1;
  for (int loop = 0; loop <= 3; loop++) { /* loop 0 warms up */
    CHECK_CUDA(cudaStreamSynchronize(c->stream));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK_CUDA(cudaEventRecord(a, c->stream));
    for (int i = 0; i < (loop ? iters : 5); i++) iteration(c, shape);
    CHECK_CUDA(cudaEventRecord(b, c->stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    double us = ms * 1e3 / (loop ? iters : 5);
    MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (loop && (best < 0 || us < best)) best = us;
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return best;
}

void load_memops(ctx_t* c) {
  if (!bench_memops64_load(&c->write64, &c->wait64)) {
    fprintf(stderr, "mpinccl_protocols: the CUDA driver lacks stream memory operations\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

int usage(void) {
  if (my_rank == 0) fprintf(stderr, "usage: mpirun -np 2 mpinccl_protocols [-b BYTES] [-c US] [-n ITERS] [-k]\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size;
  MPI_Comm_rank(MPI_COMM_WORLD, &my_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ctx_t c;
  memset(&c, 0, sizeof(c));
  c.bytes = 294912; /* halo3d's face with 2 ranks: 288 KiB */
  c.compute_us = 100;
  int iters = 200, opt, bad = 0;
  while ((opt = getopt(argc, argv, "b:c:n:k")) != -1) {
    switch (opt) {
      case 'b': c.bytes = strtoull(optarg, NULL, 10); break;
      case 'c': c.compute_us = atof(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'k': c.kernel_copies = 1; break;
      default: bad = 1;
    }
  }
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (my_rank == 0) fprintf(stderr, "mpinccl_protocols: no CUDA GPU on this machine\n");
    MPI_Finalize();
    return 2;
  }
  if (bad || size != 2 || c.bytes == 0 || c.bytes % 16 || c.compute_us < 0 || iters < 1) {
    int rc = usage();
    MPI_Finalize();
    return rc;
  }
  CHECK_CUDA(cudaSetDevice(0)); /* both ranks on one GPU: what is measured */
  c.peer = 1 - my_rank;
  load_memops(&c);
  CHECK_CUDA(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  c.mine.bytes = c.theirs.bytes = c.bytes;
  size_t region = FLAGS_BYTES + 4 * c.bytes;
  CHECK_CUDA(cudaMalloc((void**)&c.mine.base, region));
  CHECK_CUDA(cudaMemset(c.mine.base, 0, region));
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaIpcMemHandle_t h, ph;
  CHECK_CUDA(cudaIpcGetMemHandle(&h, c.mine.base));
  MPI_Sendrecv(&h, sizeof(h), MPI_BYTE, c.peer, 0, &ph, sizeof(ph), MPI_BYTE, c.peer, 0, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
  CHECK_CUDA(cudaIpcOpenMemHandle((void**)&c.theirs.base, ph, cudaIpcMemLazyEnablePeerAccess));
  int mps = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0));
  if (my_rank == 0)
    printf(
        "# %zu B each way, compute kernel %.0f us, %d iterations, copies by %s, MPS %s, both ranks on GPU 0\n"
        "# %-12s %12s %10s %10s\n",
        c.bytes, c.compute_us, iters, c.kernel_copies ? "kernel" : "copy engine", mps ? "on" : "off", "shape",
        "us/iter", "vs flags", "- compute");
  double us[SHAPES];
  for (int s = 0; s < SHAPES; s++) {
    us[s] = measure(&c, s, iters);
    if (my_rank == 0)
      printf("  %-12s %12.1f %10.3f %10.1f\n", shape_name[s], us[s], s >= FLAGS ? us[s] / us[FLAGS] : 0.0,
             us[s] - us[COMPUTE]);
  }
  CHECK_CUDA(cudaStreamSynchronize(c.stream));
  MPI_Barrier(MPI_COMM_WORLD); /* no memop of the peer still targets our region */
  CHECK_CUDA(cudaIpcCloseMemHandle(c.theirs.base));
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_CUDA(cudaFree(c.mine.base));
  CHECK_CUDA(cudaStreamDestroy(c.stream));
  MPI_Finalize();
  return 0;
}
