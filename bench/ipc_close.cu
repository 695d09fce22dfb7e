// ipc_close.cu - what closing and reopening CUDA IPC imports does, in plain
// CUDA and MPI (no mpinccl): docs/P2P.md, known problem 17.  Rank 0 owns the
// allocations; rank 1 imports them (on GPU 1 when there are two, else on GPU
// 0).  Sections:
//  1-2. closes while one of rank 1's streams is held by a stream memory wait
//       that only the host releases (as a stream waiting for a peer is); a
//       watchdog releases it after 1.5 s, so a close that returns only then
//       waited for the device;
//  3.   a close on a thread of its own, and one call an enqueue may make on
//       another thread meanwhile, timed; each call beside a close of its own
//       (one that waits would hide what the next does);
//  4.   the same after explicit peer access;
//  5-6. the owner frees an imported allocation's whole block and allocates
//       anew at the same address;
//  7.   the owner frees Q (imported here) and its neighbour R and allocates
//       S over both while the block lives: opening S, and reading S through
//       Q's mapping;
//  8.   opening S in a second context of the device instead.
// Usage: mpirun -np 2 bench/mpinccl_ipc_close
#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "memops64.h"
#include "mpi_probe.h"

enum { SMALL1, SMALL2, BIG, BIG2, NBUF };
static const size_t sizes[NBUF] = {4096, 4096, 8u << 20, 8u << 20};

typedef CUresult (*range_fn)(CUdeviceptr*, size_t*, CUdeviceptr);

/* Driver entry points for the second context (section 8), found through the
 * runtime as memops64.h finds its own. */
static struct {
  CUresult (*ctx_create)(CUcontext*, CUexecAffinityParam*, int, unsigned int, CUdevice); /* _v3 at 12.0 */
  CUresult (*ctx_get_current)(CUcontext*);
  CUresult (*ctx_push)(CUcontext);
  CUresult (*ctx_pop)(CUcontext*);
  CUresult (*ipc_open)(CUdeviceptr*, CUipcMemHandle, unsigned int);
  CUresult (*ipc_close)(CUdeviceptr);
  CUresult (*memcpy_peer_async)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
  CUresult (*stream_create)(CUstream*, unsigned int);
  CUresult (*event_create)(CUevent*, unsigned int);
  CUresult (*event_record)(CUevent, CUstream);
  CUresult (*stream_wait_event)(CUstream, CUevent, unsigned int);
} drv;

static void drv_load(void) {
  struct {
    const char* name;
    void** fn;
  } t[] = {{"cuCtxCreate", (void**)&drv.ctx_create},
           {"cuCtxGetCurrent", (void**)&drv.ctx_get_current},
           {"cuCtxPushCurrent", (void**)&drv.ctx_push},
           {"cuCtxPopCurrent", (void**)&drv.ctx_pop},
           {"cuIpcOpenMemHandle", (void**)&drv.ipc_open},
           {"cuIpcCloseMemHandle", (void**)&drv.ipc_close},
           {"cuMemcpyPeerAsync", (void**)&drv.memcpy_peer_async},
           {"cuStreamCreate", (void**)&drv.stream_create},
           {"cuEventCreate", (void**)&drv.event_create},
           {"cuEventRecord", (void**)&drv.event_record},
           {"cuStreamWaitEvent", (void**)&drv.stream_wait_event}};
  for (auto& e : t) {
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(e.name, e.fn, 12000, cudaEnableDefault, &q) != cudaSuccess || !*e.fn) {
      printf("rank %d: no driver entry point %s\n", rank, e.name);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
}

static double now_ms(void) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct held_stream {
  cudaStream_t s;
  volatile uint64_t* flag; /* host-mapped; the stream waits for it to reach gen */
  uint64_t gen;
  memop64_fn wait64;
  /* Holds the stream until release() (or the watchdog) writes the flag. */
  void hold(void) {
    gen++;
    void* dflag = nullptr;
    CK(cudaHostGetDevicePointer(&dflag, (void*)flag, 0));
    if (wait64(s, (CUdeviceptr)dflag, gen, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
      printf("rank %d: cuStreamWaitValue64 failed\n", rank);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  void release(void) { *flag = gen; }
};

/* Runs op while the stream is held; the watchdog releases it after 1.5 s.
 * Prints how long op took and whether it returned only once released. */
template <typename F>
static void while_held(held_stream* h, const char* what, F op) {
  h->hold();
  std::atomic<int> done{0};
  std::thread dog([&] {
    double t0 = now_ms();
    while (!done.load() && now_ms() - t0 < 1500) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    h->release();
  });
  double t0 = now_ms();
  cudaError_t err = op();
  double t = now_ms() - t0;
  done.store(1);
  dog.join();
  CK(cudaStreamSynchronize(h->s));
  printf("  %-58s %-28s %8.2f ms%s\n", what, cudaGetErrorString(err), t,
         t >= 1400 ? "  <- waited for the held stream" : "");
  fflush(stdout);
}

__global__ void nop_kernel(void) {}

/* One call, timed, while a close runs on a thread of its own and the stream
 * is held (a watchdog releases it after 1.5 s): a call that took about as
 * long waited with the close.  Each call gets a close of its own, so that
 * one that waited does not hide what the next does. */
template <typename F>
static void beside_close(held_stream* h, const cudaIpcMemHandle_t* handle, const char* what, F op) {
  void* mapping = nullptr;
  CK(cudaIpcOpenMemHandle(&mapping, *handle, cudaIpcMemLazyEnablePeerAccess));
  h->hold();
  double t0 = now_ms(), t_close = 0;
  std::thread closer([&] {
    CK(cudaIpcCloseMemHandle(mapping));
    t_close = now_ms() - t0;
  });
  std::thread dog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    h->release();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double t1 = now_ms();
  cudaError_t err = op();
  double took = now_ms() - t1;
  dog.join();
  closer.join();
  CK(cudaStreamSynchronize(h->s));
  printf("  %-56s %-16s %8.2f ms (close %7.2f ms)%s\n", what, cudaGetErrorString(err), took, t_close,
         took >= 1000 ? "  <- waited with the close" : "");
  fflush(stdout);
}

__global__ void other_kernel(int* p) {
  if (p) *p = 1;
}

/* The calls a launch may make, each beside a close of its own. */
static void calls_beside_closes(held_stream* h, const cudaIpcMemHandle_t* handle, const cudaIpcMemHandle_t* other,
                                memop64_fn write64) {
  cudaStream_t s = nullptr, s2 = nullptr;
  cudaEvent_t ev = nullptr, ev2 = nullptr;
  void *before = nullptr, *before2 = nullptr, *own = nullptr, *pinned = nullptr, *opened = nullptr;
  void* hostmem = aligned_alloc(4096, 1 << 16);
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaMalloc(&before, 1 << 16));
  CK(cudaMalloc(&before2, 1 << 16));
  CK(cudaStreamSynchronize(s));
  cudaIpcMemHandle_t got;
  cudaPointerAttributes attr;
  int prio = 0;
  beside_close(h, handle, "cudaMemsetAsync (a stream made before)",
               [&] { return cudaMemsetAsync(before, 0, 4096, s); });
  beside_close(h, handle, "cudaStreamSynchronize (that stream, idle)", [&] { return cudaStreamSynchronize(s); });
  beside_close(h, handle, "cudaMemsetAsync + cudaStreamSynchronize", [&] {
    cudaMemsetAsync(before, 0, 4096, s);
    return cudaStreamSynchronize(s);
  });
  beside_close(h, handle, "cudaMemcpyAsync device to device",
               [&] { return cudaMemcpyAsync(before, (char*)before + 8192, 4096, cudaMemcpyDeviceToDevice, s); });
  beside_close(h, handle, "cudaMemcpyAsync + cudaStreamSynchronize", [&] {
    cudaMemcpyAsync(before, (char*)before + 8192, 4096, cudaMemcpyDeviceToDevice, s);
    return cudaStreamSynchronize(s);
  });
  beside_close(h, handle, "kernel launch (loaded before)", [&] {
    nop_kernel<<<1, 1, 0, s>>>();
    return cudaGetLastError();
  });
  beside_close(h, handle, "kernel launch (its first)", [&] {
    other_kernel<<<1, 1, 0, s>>>(nullptr);
    return cudaGetLastError();
  });
  beside_close(h, handle, "cuStreamWriteValue64", [&] { return (cudaError_t)write64(s, (CUdeviceptr)before, 1, 0); });
  beside_close(h, handle, "cudaEventRecord + cudaEventQuery", [&] {
    cudaEventRecord(ev, s);
    cudaError_t e = cudaEventQuery(ev);
    return e == cudaErrorNotReady ? cudaSuccess : e;
  });
  beside_close(h, handle, "cudaStreamWaitEvent", [&] { return cudaStreamWaitEvent(s, ev, 0); });
  beside_close(h, handle, "cudaEventCreate", [&] { return cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming); });
  beside_close(h, handle, "cudaStreamCreate", [&] { return cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking); });
  beside_close(h, handle, "cudaStreamGetPriority", [&] { return cudaStreamGetPriority(s, &prio); });
  beside_close(h, handle, "cudaMalloc (64 KiB)", [&] { return cudaMalloc(&own, 1 << 16); });
  beside_close(h, handle, "cudaIpcGetMemHandle (an allocation made before)",
               [&] { return cudaIpcGetMemHandle(&got, before); });
  beside_close(h, handle, "cudaPointerGetAttributes", [&] { return cudaPointerGetAttributes(&attr, before); });
  beside_close(h, handle, "cudaIpcOpenMemHandle (another allocation)",
               [&] { return cudaIpcOpenMemHandle(&opened, *other, cudaIpcMemLazyEnablePeerAccess); });
  beside_close(h, handle, "cudaIpcCloseMemHandle (that one)",
               [&] { return opened ? cudaIpcCloseMemHandle(opened) : cudaErrorInvalidValue; });
  beside_close(h, handle, "cudaHostAlloc (mapped, 64 KiB)",
               [&] { return cudaHostAlloc(&pinned, 1 << 16, cudaHostAllocMapped); });
  beside_close(h, handle, "cudaFreeHost", [&] { return pinned ? cudaFreeHost(pinned) : cudaErrorInvalidValue; });
  beside_close(h, handle, "cudaHostRegister (64 KiB, mapped)",
               [&] { return cudaHostRegister(hostmem, 1 << 16, cudaHostRegisterMapped); });
  beside_close(h, handle, "cudaHostUnregister", [&] { return cudaHostUnregister(hostmem); });
  beside_close(h, handle, "cudaFree (an allocation made before)", [&] { return cudaFree(before2); });
  CK(cudaStreamSynchronize(s));
  if (s2) CK(cudaStreamDestroy(s2));
  if (ev2) CK(cudaEventDestroy(ev2));
  if (own) CK(cudaFree(own));
  CK(cudaEventDestroy(ev));
  CK(cudaStreamDestroy(s));
  CK(cudaFree(before));
  free(hostmem);
}

/* What the importer's sections share. */
struct probe {
  held_stream h;
  memop64_fn write64;
  range_fn range;
  void* m[NBUF];
  const cudaIpcMemHandle_t* hs;
  const uint64_t* addrs;
  int dev, owner_dev;
  cudaIpcMemHandle_t pqr[3], s_handle; /* section 7's allocations, for section 8 */
};

static const unsigned lazy = cudaIpcMemLazyEnablePeerAccess;

/* Sections 1 to 3: two small allocations of one block; closes while a
 * stream is held; a close on a thread of its own. */
static void sections_1_to_3(probe* p) {
  held_stream& h = p->h;
  void** m = p->m;
  const cudaIpcMemHandle_t* hs = p->hs;
  const uint64_t* addrs = p->addrs;
  range_fn range = p->range;
  printf("1. two small allocations of one block, lazy peer access\n");
  CK(cudaIpcOpenMemHandle(&m[SMALL1], hs[SMALL1], lazy));
  cudaError_t e = cudaIpcOpenMemHandle(&m[SMALL2], hs[SMALL2], lazy);
  printf("  open small 1: ok at %p; open small 2: %s\n", m[SMALL1], cudaGetErrorString(e));
  cudaGetLastError();
  CUdeviceptr rb = 0;
  size_t rs = 0;
  long long delta = (long long)(addrs[SMALL2] - addrs[SMALL1]);
  CUresult r1 = range(&rb, &rs, (CUdeviceptr)m[SMALL1]);
  printf("  owner: small 2 is %lld bytes from small 1; range of small 1's mapping: %d [%llx, +%zu)\n", delta, (int)r1,
         (unsigned long long)rb, rs);
  CUresult r2 = range(&rb, &rs, (CUdeviceptr)((char*)m[SMALL1] + delta));
  printf("  range of small 1's mapping + %lld: %d [%llx, +%zu)\n", delta, (int)r2, (unsigned long long)rb, rs);
  CK(cudaIpcOpenMemHandle(&m[BIG], hs[BIG], lazy));
  printf("2. closes while a stream of this process waits (lazy peer access)\n");
  while_held(&h, "close small 1 (big still open)", [&] { return cudaIpcCloseMemHandle(m[SMALL1]); });
  if (e != cudaSuccess) CK(cudaIpcOpenMemHandle(&m[SMALL2], hs[SMALL2], lazy));
  while_held(&h, "close small 2 (big still open)", [&] { return cudaIpcCloseMemHandle(m[SMALL2]); });
  while_held(&h, "close big (the last import of the owner's memory)", [&] { return cudaIpcCloseMemHandle(m[BIG]); });
  while_held(&h, "open small 1 (no import left)", [&] { return cudaIpcOpenMemHandle(&m[SMALL1], hs[SMALL1], lazy); });
  while_held(&h, "close small 1 (the only import)", [&] { return cudaIpcCloseMemHandle(m[SMALL1]); });
  printf("3. a close on a thread of its own, and one call meanwhile (each beside a close of its own)\n");
  CK(cudaIpcOpenMemHandle(&m[SMALL1], hs[SMALL1], lazy));
  calls_beside_closes(&h, &hs[BIG], &hs[BIG2], p->write64);
  CK(cudaIpcCloseMemHandle(m[SMALL1]));
}

/* Section 4: the closes again after explicit peer access (two GPUs). */
static void section_4(probe* p) {
  held_stream& h = p->h;
  void** m = p->m;
  const cudaIpcMemHandle_t* hs = p->hs;
  int dev = p->dev, owner_dev = p->owner_dev;
  int can = 0;
  CK(cudaDeviceCanAccessPeer(&can, dev, owner_dev));
  cudaError_t pe = can ? cudaDeviceEnablePeerAccess(owner_dev, 0) : cudaErrorPeerAccessUnsupported;
  printf("4. the same after cudaDeviceEnablePeerAccess(%d): %s\n", owner_dev, cudaGetErrorString(pe));
  cudaGetLastError();
  CK(cudaIpcOpenMemHandle(&m[SMALL1], hs[SMALL1], lazy));
  CK(cudaIpcOpenMemHandle(&m[BIG], hs[BIG], lazy));
  while_held(&h, "close small 1 (big still open)", [&] { return cudaIpcCloseMemHandle(m[SMALL1]); });
  while_held(&h, "close big (the last import)", [&] { return cudaIpcCloseMemHandle(m[BIG]); });
}

/* Sections 5 and 6: the owner frees the small allocations' block and
 * allocates anew at the same address. */
static void sections_5_6(probe* p) {
  void** m = p->m;
  const uint64_t* addrs = p->addrs;
  const cudaIpcMemHandle_t* hs = p->hs;
  range_fn range = p->range;
  CUdeviceptr rb = 0;
  size_t rs = 0;
  printf("5. the owner frees both small allocations and makes one of 12 KiB; small 1 stays open here\n");
  CK(cudaIpcOpenMemHandle(&m[SMALL1], hs[SMALL1], lazy));
  cudaIpcMemHandle_t rh;
  uint64_t raddr = 0;
  int go = 1;
  MPI_Send(&go, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
  MPI_Recv(&rh, sizeof(rh), MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Recv(&raddr, 1, MPI_UINT64_T, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  long long rdelta = (long long)(raddr - addrs[SMALL1]);
  void* rm = nullptr;
  cudaError_t re = cudaIpcOpenMemHandle(&rm, rh, lazy);
  cudaGetLastError();
  printf("  the new one is %lld bytes from small 1 in the owner; open: %s at %p (small 1's mapping + %lld: %p)\n",
         rdelta, cudaGetErrorString(re), rm, rdelta, (void*)((char*)m[SMALL1] + rdelta));
  void* guess = (char*)m[SMALL1] + rdelta;
  for (long long off = 0; off < 12288; off += 4096) {
    CUresult rr = range(&rb, &rs, (CUdeviceptr)((char*)guess + off));
    printf("  range of small 1's mapping + %lld: %d [%llx, +%zu)\n", rdelta + off, (int)rr, (unsigned long long)rb, rs);
  }
  printf("6. reads through small 1's mapping (a fault here ends the run)\n");
  fflush(stdout);
  for (long long off = 0; off < 12288; off += 4096) {
    unsigned char got = 0;
    cudaError_t c = cudaMemcpy(&got, (char*)guess + off, 1, cudaMemcpyDeviceToHost);
    printf("  byte at the new allocation + %lld: 0x%02x (%s; 0x77 expected)\n", off, got, cudaGetErrorString(c));
    fflush(stdout);
    if (c != cudaSuccess) break;
  }
  if (re == cudaSuccess) CK(cudaIpcCloseMemHandle(rm));
  CK(cudaIpcCloseMemHandle(m[SMALL1]));
  re = cudaIpcOpenMemHandle(&rm, rh, lazy);
  printf("  after closing small 1, open of the new one: %s at %p\n", cudaGetErrorString(re), rm);
}

/* Section 7: S over a freed Q (still open here) while the block lives. */
static void section_7(probe* p) {
  int go = 1;
  printf("7. the owner makes P, Q, R (4 KiB each); Q is opened here; the owner frees Q and R and makes S (8 KiB)\n");
  MPI_Send(&go, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
  cudaIpcMemHandle_t* pqr = p->pqr;
  cudaIpcMemHandle_t& sh = p->s_handle;
  uint64_t pqr_addr[3], saddr = 0;
  MPI_Recv(pqr, sizeof(p->pqr), MPI_BYTE, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Recv(pqr_addr, 3, MPI_UINT64_T, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  void* qm = nullptr;
  CK(cudaIpcOpenMemHandle(&qm, pqr[1], lazy));
  MPI_Send(&go, 1, MPI_INT, 0, 6, MPI_COMM_WORLD);
  MPI_Recv(&sh, sizeof(sh), MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Recv(&saddr, 1, MPI_UINT64_T, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  long long sdelta = (long long)(saddr - pqr_addr[1]);
  void* sm = nullptr;
  cudaError_t se = cudaIpcOpenMemHandle(&sm, sh, lazy);
  cudaGetLastError();
  printf("  owner: P at Q%+lld, R at Q%+lld, S at Q%+lld; open of S: %s at %p (Q's mapping %p)\n",
         (long long)(pqr_addr[0] - pqr_addr[1]), (long long)(pqr_addr[2] - pqr_addr[1]), sdelta, cudaGetErrorString(se),
         sm, qm);
  fflush(stdout);
  for (long long off = 0; off < 8192; off += 4096) {
    unsigned char got = 0;
    cudaError_t c = cudaMemcpy(&got, (char*)qm + sdelta + off, 1, cudaMemcpyDeviceToHost);
    printf("  byte at Q's mapping + %lld: 0x%02x (%s; 0x66 expected)\n", sdelta + off, got, cudaGetErrorString(c));
    fflush(stdout);
    if (c != cudaSuccess) break;
  }
}

/* Section 8: S through a second context of the device. */
static void section_8(probe* p) {
  held_stream& h = p->h;
  int dev = p->dev;
  printf("8. S through a second context of this device, Q still open in the first, a stream held\n");
  drv_load();
  CUcontext prim = nullptr, sec = nullptr;
  drv.ctx_get_current(&prim);
  CUresult cr = drv.ctx_create(&sec, nullptr, 0, 0, (CUdevice)dev);
  CUstream ss = nullptr;
  CUevent es = nullptr;
  CUdeviceptr sptr = 0;
  CUresult so = CUDA_ERROR_UNKNOWN;
  if (cr == CUDA_SUCCESS) {
    drv.stream_create(&ss, CU_STREAM_NON_BLOCKING);
    drv.event_create(&es, CU_EVENT_DISABLE_TIMING);
    CUdeviceptr pp = 0;
    CUresult po = drv.ipc_open(&pp, *(CUipcMemHandle*)&p->pqr[0], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    printf("  in the second context, open of P (never opened here): %d\n", (int)po);
    if (po == CUDA_SUCCESS) drv.ipc_close(pp);
    so = drv.ipc_open(&sptr, *(CUipcMemHandle*)&p->s_handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    drv.ctx_pop(nullptr);
  }
  CUcontext now = nullptr;
  drv.ctx_get_current(&now);
  printf("  second context: %d; open of S there: %d at %llx; current context is the first again: %s\n", (int)cr,
         (int)so, (unsigned long long)sptr, now == prim ? "yes" : "no");
  fflush(stdout);
  int ok = 0;
  if (so == CUDA_SUCCESS) {
    void* src = nullptr;
    CK(cudaMalloc(&src, 8192));
    cudaStream_t p2;
    CK(cudaStreamCreateWithFlags(&p2, cudaStreamNonBlocking));
    CK(cudaMemsetAsync(src, 0x99, 8192, p2));
    cudaEvent_t e1;
    CK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
    CUresult steps[4];
    double t_sync = 0;
    while_held(&h, "copy into S through the second context, then wait on it", [&] {
      CK(cudaEventRecord(e1, p2));
      steps[0] = drv.stream_wait_event(ss, (CUevent)e1, 0);
      steps[1] = drv.memcpy_peer_async(sptr, sec, (CUdeviceptr)src, prim, 8192, ss);
      steps[2] = drv.event_record(es, ss);
      steps[3] = drv.stream_wait_event((CUstream)p2, es, 0);
      double t0 = now_ms();
      cudaError_t err = cudaStreamSynchronize(p2);
      t_sync = now_ms() - t0;
      return err;
    });
    printf("  steps %d %d %d %d; the first context's stream had the copy done after %.2f ms\n", (int)steps[0],
           (int)steps[1], (int)steps[2], (int)steps[3], t_sync);
    drv.ctx_push(sec);
    while_held(&h, "close S in the second context", [&] { return (cudaError_t)drv.ipc_close(sptr); });
    drv.ctx_pop(nullptr);
    ok = 1;
  }
  MPI_Send(&ok, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
}

static void importer(int dev, int owner_dev, const cudaIpcMemHandle_t* hs, const uint64_t* addrs) {
  static probe pr; /* (large: not on the stack) */
  probe* p = &pr;
  p->hs = hs;
  p->addrs = addrs;
  p->dev = dev;
  p->owner_dev = owner_dev;
  if (!bench_memops64_load(&p->write64, &p->h.wait64)) {
    printf("rank 1: no 64-bit stream memory operations\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  enum cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void**)&p->range, 12000, cudaEnableDefault, &q));
  CK(cudaStreamCreateWithFlags(&p->h.s, cudaStreamNonBlocking));
  CK(cudaHostAlloc((void**)&p->h.flag, sizeof(uint64_t), cudaHostAllocMapped));
  *p->h.flag = 0;
  printf("importer on GPU %d, owner on GPU %d\n", dev, owner_dev);
  sections_1_to_3(p);
  if (owner_dev != dev) section_4(p);
  sections_5_6(p);
  section_7(p);
  section_8(p);
}

/* An allocation of bytes filled with fill, and what a peer needs to map it. */
static void* shared_alloc(size_t bytes, int fill, cudaIpcMemHandle_t* h, uint64_t* addr) {
  void* p = nullptr;
  CK(cudaMalloc(&p, bytes));
  CK(cudaMemset(p, fill, bytes));
  CK(cudaDeviceSynchronize());
  CK(cudaIpcGetMemHandle(h, p));
  *addr = (uint64_t)(uintptr_t)p;
  return p;
}

/* Sends n handles, then their addresses, to rank 1 (tags tag, tag + 1). */
static void send_shared(const cudaIpcMemHandle_t* h, const uint64_t* addr, int n, int tag) {
  MPI_Send(h, (int)sizeof(*h) * n, MPI_BYTE, 1, tag, MPI_COMM_WORLD);
  MPI_Send(addr, n, MPI_UINT64_T, 1, tag + 1, MPI_COMM_WORLD);
}

static void wait_for_importer(int tag) {
  int go = 0;
  MPI_Recv(&go, 1, MPI_INT, 1, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* Rank 0's side of sections 5 to 8 (the allocations of sections 1 to 4
 * are bufs); frees what it made. */
static void owner(void** bufs) {
  cudaIpcMemHandle_t h;
  uint64_t addr;
  wait_for_importer(0); /* section 5: one 12 KiB allocation over both small ones */
  CK(cudaFree(bufs[SMALL1]));
  CK(cudaFree(bufs[SMALL2]));
  bufs[SMALL2] = nullptr;
  bufs[SMALL1] = shared_alloc(12288, 0x77, &h, &addr);
  send_shared(&h, &addr, 1, 1);
  wait_for_importer(3); /* section 7: P, Q, R, then S over Q and R */
  void* pqr[3];
  cudaIpcMemHandle_t ph[3];
  uint64_t pa[3];
  for (int i = 0; i < 3; i++) pqr[i] = shared_alloc(4096, 0x21 + i, &ph[i], &pa[i]);
  send_shared(ph, pa, 3, 4);
  wait_for_importer(6);
  CK(cudaFree(pqr[1]));
  CK(cudaFree(pqr[2]));
  void* s8 = shared_alloc(8192, 0x66, &h, &addr);
  send_shared(&h, &addr, 1, 7);
  int copied = 0; /* section 8: what the importer wrote into S */
  MPI_Recv(&copied, 1, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  unsigned char got[8192];
  CK(cudaMemcpy(got, s8, sizeof(got), cudaMemcpyDeviceToHost));
  int good = 0;
  for (size_t i = 0; i < sizeof(got); i++) good += got[i] == 0x99;
  printf("owner: %d of 8192 bytes of S are 0x99 (the importer %s)\n", good, copied ? "copied" : "did not copy");
  CK(cudaFree(s8));
  CK(cudaFree(pqr[0]));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int size = 0, ndev = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1 || size != 2) {
    if (rank == 0) printf("ipc_close: needs 2 ranks and a GPU (%d ranks, %d GPUs)\n", size, ndev);
    MPI_Finalize();
    return 2;
  }
  int dev = rank == 1 && ndev > 1 ? 1 : 0;
  CK(cudaSetDevice(dev));
  cudaIpcMemHandle_t hs[NBUF];
  uint64_t addrs[NBUF];
  void* bufs[NBUF] = {};
  if (rank == 0)
    for (int i = 0; i < NBUF; i++) bufs[i] = shared_alloc(sizes[i], 0x11 * (i + 1), &hs[i], &addrs[i]);
  MPI_Bcast(hs, sizeof(hs), MPI_BYTE, 0, MPI_COMM_WORLD);
  MPI_Bcast(addrs, sizeof(addrs), MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rank == 1)
    importer(dev, 0, hs, addrs);
  else
    owner(bufs);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0)
    for (int i = 0; i < NBUF; i++)
      if (bufs[i]) CK(cudaFree(bufs[i]));
  MPI_Finalize();
  return 0;
}
