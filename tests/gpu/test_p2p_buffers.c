/*
 * test_p2p_buffers.c - test_p2p's steps for the buffers a message names:
 * one that runs past the end of its allocation is refused on every path
 * (CUDA IPC, the inbox, a rank to itself, ranks of one process, UCX) and
 * nothing moves; pageable host memory is refused where our kernels would
 * copy it; managed and pinned host memory move whole within a process;
 * memory of CUDA's virtual memory API moves whole on every path, also as
 * one buffer over two mappings placed back to back.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "mpinccl.h"
#include "p2p/p2p.h"
#include "pattern.h"
#include "test_p2p.h"

/* Whether the bytes of buf, of which the first short_bytes were set to
 * 0x5a, still are: nothing moved into it. */
static void expect_untouched(const char* buf, size_t bytes, const char* what) {
  char* host = malloc(bytes);
  EXPECT(host && cudaMemcpy(host, buf, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  size_t changed = 0;
  for (size_t i = 0; host && i < bytes; i++) changed += host[i] != 0x5a;
  if (changed) fprintf(stderr, "%s: %zu bytes of the receive buffer changed\n", what, changed);
  EXPECT(changed == 0);
  free(host);
}

/* Then a message of bytes between the same two ranks arrives whole: the
 * refused one left the pair's numbering (and its inbox ring) in step. */
static void after_refusal(ncclComm_t c, int me, size_t bytes, int k) {
  char* buf = dev_alloc(bytes);
  if (me == 0) pattern_fill(buf, bytes, seed_of(0, 1, k), stream);
  EXPECT_OK(me == 0 ? ncclSend(buf, bytes, ncclInt8, 1, c, stream) : ncclRecv(buf, bytes, ncclInt8, 0, c, stream));
  if (me == 1) expect_pattern(buf, bytes, seed_of(0, 1, k), "the message after a refused one");
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaFree(buf);
}

/* One message of bytes from rank 0 to rank 1 of two, where short_side's
 * buffer is a cudaMalloc of only short_bytes: that side's ncclGroupEnd
 * refuses it, the other hears of it, nothing moves and nobody hangs.
 * Messages up to the inbox's sizes take it where it is used (MPS). */
static void short_case(MPI_Comm two, int short_side, size_t short_bytes, size_t bytes) {
  ncclComm_t pair = NULL;
  EXPECT_OK(mpincclCommInitMPI(&pair, two, NULL));
  int me_short = rank == short_side, eager = inbox_between(1 - rank, 0, bytes > 4096) && bytes <= 385024;
  char* buf = dev_alloc(me_short ? short_bytes : bytes);
  if (rank == 1) EXPECT(cudaMemsetAsync(buf, 0x5a, me_short ? short_bytes : bytes, stream) == cudaSuccess);
  if (rank == 0) pattern_fill(buf, me_short ? short_bytes : bytes, seed_of(0, 1, 9100), stream);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  uint64_t before[2], after[2], unused[2];
  mpn_p2p_stats(pair, before, &unused[0], &unused[1]);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(rank == 0 ? ncclSend(buf, bytes, ncclInt8, 1, pair, stream)
                      : ncclRecv(buf, bytes, ncclInt8, 0, pair, stream));
  if (me_short)
    EXPECT_ERR(ncclGroupEnd(), ncclInvalidArgument, "runs past the end of its allocation");
  else
    EXPECT_OK(ncclGroupEnd());
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess); /* no hang */
  mpn_p2p_stats(pair, after, &unused[0], &unused[1]);
  if (eager) EXPECT(after[0] + after[1] == before[0] + before[1] + 1); /* it went the inbox's way */
  MPI_Barrier(two);
  ncclResult_t async = ncclSuccess; /* (the short side had its ncclGroupEnd's code) */
  EXPECT_OK(ncclCommGetAsyncError(pair, &async));
  /* the peer's refusal, whichever side posted first */
  EXPECT(me_short || async == ncclRemoteError);
  if (rank == 1) expect_untouched(buf, me_short ? short_bytes : bytes, "short_buffer"); /* nothing moved */
  MPI_Barrier(two);
  after_refusal(pair, rank, bytes, 9101);
  MPI_Barrier(two);
  EXPECT_OK(ncclCommDestroy(pair));
  cudaFree(buf);
}

/* Over UCX a short buffer is refused before anything of its group is
 * enqueued, and its peer is not told (its matching call would wait, as for
 * any refused argument): here the peer posts nothing, and a whole message
 * follows. */
static void short_ucx_case(MPI_Comm two, int short_side) {
  enum { SHORT = 1 << 20, BYTES = 2 << 20 };
  ncclComm_t pair = NULL;
  EXPECT_OK(mpincclCommInitMPI(&pair, two, NULL));
  if (rank == short_side) {
    char* buf = dev_alloc(SHORT);
    EXPECT_OK(ncclGroupStart());
    EXPECT_OK(rank == 0 ? ncclSend(buf, BYTES, ncclInt8, 1, pair, stream)
                        : ncclRecv(buf, BYTES, ncclInt8, 0, pair, stream));
    EXPECT_ERR(ncclGroupEnd(), ncclInvalidArgument, "runs past the end of its allocation");
    cudaFree(buf);
  }
  MPI_Barrier(two);
  after_refusal(pair, rank, BYTES, 9102);
  MPI_Barrier(two);
  EXPECT_OK(ncclCommDestroy(pair));
}

/* A send or receive buffer shorter than its message, to a peer in another
 * process: refused on its side (the copy would read or write past the
 * allocation), with either side short, for a buffer shared through CUDA
 * IPC and for the inbox's small and big slots, or over UCX. */
void short_buffer(void) {
  if (nranks < 2) return;
  static const size_t sizes[][2] = {{1 << 20, 2 << 20}, {64 << 10, 256 << 10}, {1024, 4096}};
  MPI_Comm two;
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : MPI_UNDEFINED, rank, &two);
  if (rank > 1) return;
  for (int k = 0; k < 3 && !harness_over_ucx(); k++)
    for (int side = 0; side < 2; side++) short_case(two, side, sizes[k][0], sizes[k][1]);
  for (int side = 0; side < 2 && harness_over_ucx(); side++) short_ucx_case(two, side);
  MPI_Comm_free(&two);
}

/* Communicators within this process: a rank to itself (local 0: one of
 * one rank, c[0]) or two ranks of ncclCommInitAll on this GPU (local 1). */
static void here_open(int local, ncclComm_t c[2]) {
  if (local)
    harness_init_all_here(c, 2);
  else
    EXPECT_OK(mpincclCommInitMPI(&c[0], MPI_COMM_SELF, NULL));
}

static void here_close(int local, ncclComm_t c[2]) {
  for (int i = 0; i < 1 + local; i++) EXPECT_OK(ncclCommDestroy(c[i]));
}

/* The same within this process, where no CUDA IPC export looks a buffer
 * up: a rank to itself (local 0: a communicator of one rank) and two ranks
 * of ncclCommInitAll on this GPU (local 1), either side short. */
static void short_here_case(int local, int short_side) {
  enum { SHORT = 1024, BYTES = 4096 };
  ncclComm_t c[2] = {NULL, NULL};
  here_open(local, c);
  ncclComm_t from = c[0], to = local ? c[1] : c[0];
  char* s = dev_alloc(short_side == 0 ? SHORT : BYTES);
  char* r = dev_alloc(short_side == 1 ? SHORT : BYTES);
  pattern_fill(s, short_side == 0 ? SHORT : BYTES, seed_of(rank, rank, 9200), stream);
  EXPECT(cudaMemsetAsync(r, 0x5a, short_side == 1 ? SHORT : BYTES, stream) == cudaSuccess);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s, BYTES, ncclInt8, local, from, stream));
  EXPECT_OK(ncclRecv(r, BYTES, ncclInt8, 0, to, stream));
  EXPECT(ncclGroupEnd() == ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(short_side == 0 ? from : to), "runs past the end of its allocation") != NULL);
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess); /* no hang */
  ncclResult_t async = ncclSuccess;
  EXPECT_OK(ncclCommGetAsyncError(short_side == 0 ? to : from, &async)); /* the other side heard */
  EXPECT(async != ncclSuccess && async != ncclInProgress);
  EXPECT(!local || async == ncclRemoteError); /* (of one rank, the comm refused its own buffer too) */
  expect_untouched(r, short_side == 1 ? SHORT : BYTES, "short_here");
  here_close(local, c);
  cudaFree(s);
  cudaFree(r);
}

/* Pageable host memory (malloc) named as a send buffer: the GPU may not
 * reach it (without HMM), so it is refused, or, where CUDA says the GPU
 * reaches it at that address, it moves whole. */
static void pageable_send(void) {
  enum { BYTES = 4096 };
  ncclComm_t self = NULL;
  EXPECT_OK(mpincclCommInitMPI(&self, MPI_COMM_SELF, NULL));
  char* host = malloc(BYTES);
  char* r = dev_alloc(BYTES);
  /* (done before the receive: the legacy stream's memset is not ordered with stream) */
  EXPECT(host != NULL && cudaMemset(r, 0x5a, BYTES) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess);
  for (int i = 0; host && i < BYTES; i++) host[i] = (char)(i * 7 + 1);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(host, BYTES, ncclInt8, 0, self, stream));
  EXPECT_OK(ncclRecv(r, BYTES, ncclInt8, 0, self, stream));
  ncclResult_t res = ncclGroupEnd();
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  if (rank == 0)
    fprintf(stderr, "pageable_send: %s\n", res == ncclSuccess ? "moved (CUDA says the GPU reaches it)" : "refused");
  if (res == ncclSuccess) { /* the GPU reaches pageable memory here */
    char* back = malloc(BYTES);
    EXPECT(back && cudaMemcpy(back, r, BYTES, cudaMemcpyDeviceToHost) == cudaSuccess);
    EXPECT(back && memcmp(back, host, BYTES) == 0);
    free(back);
  } else {
    EXPECT(res == ncclInvalidArgument);
    EXPECT(strstr(ncclGetLastError(self), "neither device memory nor pinned host memory") != NULL);
    expect_untouched(r, BYTES, "pageable_send");
  }
  EXPECT_OK(ncclCommDestroy(self));
  free(host);
  cudaFree(r);
}

void short_here(void) {
  for (int local = 0; local < 2; local++)
    for (int side = 0; side < 2; side++) short_here_case(local, side);
  pageable_send();
}

/* Managed memory and pinned host memory (cudaHostAlloc) on either side of
 * a message within this process (to the rank itself, and between two
 * ranks of ncclCommInitAll), at a size the copy kernel moves and one the
 * copy engine moves: the buffer check lets them through, and every byte
 * arrives. */
typedef enum { MEM_DEVICE, MEM_MANAGED, MEM_PINNED } mem_kind_t;

static char* mem_alloc(mem_kind_t kind, size_t bytes) {
  char* p = NULL;
  if (kind == MEM_MANAGED)
    EXPECT(cudaMallocManaged((void**)&p, bytes, cudaMemAttachGlobal) == cudaSuccess);
  else if (kind == MEM_PINNED)
    EXPECT(cudaHostAlloc((void**)&p, bytes, cudaHostAllocDefault) == cudaSuccess);
  else
    p = dev_alloc(bytes);
  return p;
}

static void mem_free(mem_kind_t kind, char* p) {
  if (kind == MEM_PINNED)
    cudaFreeHost(p);
  else
    cudaFree(p);
}

static void other_memory_case(int local, mem_kind_t send_kind, mem_kind_t recv_kind, size_t bytes, int k) {
  ncclComm_t c[2] = {NULL, NULL};
  here_open(local, c);
  ncclComm_t from = c[0], to = local ? c[1] : c[0];
  char *s = mem_alloc(send_kind, bytes), *r = mem_alloc(recv_kind, bytes);
  pattern_fill(s, bytes, seed_of(rank, rank, 9400 + k), stream);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, local, from, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, 0, to, stream));
  EXPECT_OK(ncclGroupEnd());
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  char what[80];
  snprintf(what, sizeof(what), "other_memory: %s, kinds %d -> %d, %zu bytes", local ? "InitAll pair" : "self",
           (int)send_kind, (int)recv_kind, bytes);
  expect_pattern(r, bytes, seed_of(rank, rank, 9400 + k), what);
  here_close(local, c);
  mem_free(send_kind, s);
  mem_free(recv_kind, r);
}

void other_memory(void) {
  static const mem_kind_t pairs[][2] = {
      {MEM_MANAGED, MEM_DEVICE}, {MEM_DEVICE, MEM_MANAGED}, {MEM_PINNED, MEM_DEVICE}, {MEM_DEVICE, MEM_PINNED}};
  static const size_t sizes[] = {4099, (1 << 20) + 3};
  int k = 0;
  for (int local = 0; local < 2; local++)
    for (int i = 0; i < 4; i++)
      for (int z = 0; z < 2; z++) other_memory_case(local, pairs[i][0], pairs[i][1], sizes[z], k++);
}

/* Two allocations of CUDA's virtual memory API (cuMemCreate, no shareable
 * handle), of one granularity each, mapped back to back at the start of a
 * reserved range of three (the third left unmapped: nothing follows them)
 * that this device reads and writes: one buffer over two mappings, as
 * PyTorch's expandable segments make.  The driver's calls through the
 * runtime's entry points, as the library reaches them. */
typedef struct {
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*address_free)(CUdeviceptr, size_t);
} vmm_api_t;

typedef struct {
  CUdeviceptr va;
  size_t gran;
  CUmemGenericAllocationHandle h[2];
} vmm_t;

static int vmm_load(vmm_api_t* api) {
  const char* names[] = {"cuMemGetAllocationGranularity",
                         "cuMemCreate",
                         "cuMemAddressReserve",
                         "cuMemMap",
                         "cuMemSetAccess",
                         "cuMemUnmap",
                         "cuMemRelease",
                         "cuMemAddressFree"};
  void** slots[] = {(void**)&api->granularity, (void**)&api->create, (void**)&api->reserve, (void**)&api->map,
                    (void**)&api->set_access,  (void**)&api->unmap,  (void**)&api->release, (void**)&api->address_free};
  for (int i = 0; i < 8; i++) {
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion(names[i], slots[i], 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return 0;
  }
  return 1;
}

static void vmm_alloc(const vmm_api_t* api, vmm_t* m) {
  int dev = 0;
  EXPECT(cudaGetDevice(&dev) == cudaSuccess);
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
  CUmemAccessDesc rw = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT(api->granularity(&m->gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS);
  EXPECT(api->reserve(&m->va, 3 * m->gran, 0, 0, 0) == CUDA_SUCCESS);
  for (int i = 0; i < 2; i++) {
    EXPECT(api->create(&m->h[i], m->gran, &prop, 0) == CUDA_SUCCESS);
    EXPECT(api->map(m->va + i * m->gran, m->gran, 0, m->h[i], 0) == CUDA_SUCCESS);
  }
  EXPECT(api->set_access(m->va, 2 * m->gran, &rw, 1) == CUDA_SUCCESS);
}

static void vmm_free(const vmm_api_t* api, vmm_t* m) {
  EXPECT(cudaStreamSynchronize(stream) == cudaSuccess);
  EXPECT(api->unmap(m->va, 2 * m->gran) == CUDA_SUCCESS);
  for (int i = 0; i < 2; i++) EXPECT(api->release(m->h[i]) == CUDA_SUCCESS);
  EXPECT(api->address_free(m->va, 3 * m->gran) == CUDA_SUCCESS);
}

/* A ring of one message of bytes at offset at of each rank's two ranges,
 * every byte checked. */
static void vmm_ring(vmm_t* send, vmm_t* recv, size_t at, size_t bytes, int k, const char* what) {
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  char *s = (char*)(uintptr_t)send->va + at, *r = (char*)(uintptr_t)recv->va + at;
  pattern_fill(s, bytes, seed_of(rank, to, k), stream);
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(s, bytes, ncclInt8, to, comm, stream));
  EXPECT_OK(ncclRecv(r, bytes, ncclInt8, from, comm, stream));
  EXPECT_OK(ncclGroupEnd());
  expect_pattern(r, bytes, seed_of(from, rank, k), what);
  MPI_Barrier(MPI_COMM_WORLD); /* the next message into r comes after this check */
}

/*
 * Buffers of CUDA's virtual memory API, which legacy CUDA IPC cannot share:
 * between processes they are staged, as memory-pool buffers are (they were
 * refused, ncclInvalidUsage), and a buffer over two mappings placed back
 * to back is one buffer (it was refused as running past its allocation);
 * one past the last mapping is still refused.  A rank to itself too.
 */
void vmm_buffers(void) {
  vmm_api_t api;
  if (!vmm_load(&api)) {
    printf("vmm_buffers: the driver lacks the virtual memory API: skipped\n");
    return;
  }
  vmm_t send, recv;
  vmm_alloc(&api, &send);
  vmm_alloc(&api, &recv);
  size_t g = send.gran;
  vmm_ring(&send, &recv, 8, 8, 110, "vmm_buffers: 8 bytes");
  vmm_ring(&send, &recv, 4096 + 3, 65536 + 5, 111, "vmm_buffers: inside the first mapping");
  vmm_ring(&send, &recv, g - 100000, 200000 + 7, 112, "vmm_buffers: over both mappings");
  vmm_ring(&send, &recv, 0, 2 * g, 113, "vmm_buffers: both mappings whole");
  ncclComm_t self = NULL; /* past the last mapping: refused, nothing issued */
  EXPECT_OK(mpincclCommInitMPI(&self, MPI_COMM_SELF, NULL));
  char* end = (char*)(uintptr_t)send.va + 2 * g;
  EXPECT_OK(ncclGroupStart());
  EXPECT_OK(ncclSend(end - 100, 200, ncclInt8, 0, self, stream));
  EXPECT_OK(ncclRecv((char*)(uintptr_t)recv.va, 200, ncclInt8, 0, self, stream));
  EXPECT(ncclGroupEnd() == ncclInvalidArgument);
  EXPECT(strstr(ncclGetLastError(self), "runs past the end") != NULL);
  EXPECT_OK(ncclCommDestroy(self));
  vmm_free(&api, &send);
  vmm_free(&api, &recv);
}
