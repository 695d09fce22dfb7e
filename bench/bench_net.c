/*
 * bench_net.c - the UCX path's floors (bench_net.h).
 */
#include "bench_net.h"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef BENCH_HAVE_UCX
#include <ucp/api/ucp.h>
#endif

#define NET_CUDA(call)                                                                     \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "mpinccl_bench: %s failed: %s\n", #call, cudaGetErrorString(e_));    \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
    }                                                                                      \
  } while (0)

/* Best of three timed copies of one direction on one stream (after one untimed). */
static double copy_rate(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind) {
  cudaStream_t s;
  cudaEvent_t a, b;
  NET_CUDA(cudaStreamCreate(&s));
  NET_CUDA(cudaEventCreate(&a));
  NET_CUDA(cudaEventCreate(&b));
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    NET_CUDA(cudaEventRecord(a, s));
    NET_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, s));
    NET_CUDA(cudaEventRecord(b, s));
    NET_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    NET_CUDA(cudaEventElapsedTime(&ms, a, b));
    double gbps = ms > 0 ? (double)bytes / (ms * 1e6) : 0;
    if (rep > 0 && gbps > best) best = gbps;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  return best;
}

void bench_net_copies(MPI_Comm comm, size_t bytes, bench_net_t* out) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  double rates[2] = {0, 0};
  if (rank == 0) {
    void *host = NULL, *dev = NULL;
    NET_CUDA(cudaMallocHost(&host, bytes));
    NET_CUDA(cudaMalloc(&dev, bytes));
    NET_CUDA(cudaMemset(dev, 1, bytes));
    memset(host, 2, bytes);
    rates[0] = copy_rate(host, dev, bytes, cudaMemcpyDeviceToHost);
    rates[1] = copy_rate(dev, host, bytes, cudaMemcpyHostToDevice);
    cudaFreeHost(host);
    cudaFree(dev);
  }
  MPI_Bcast(rates, 2, MPI_DOUBLE, 0, comm);
  out->d2h_gbps = rates[0];
  out->h2d_gbps = rates[1];
}

#ifdef BENCH_HAVE_UCX
typedef struct {
  ucp_context_h ctx;
  ucp_worker_h worker;
  ucp_ep_h ep;
  ucp_mem_h mem;
  ucp_rkey_h rkey;
  volatile uint64_t* word; /* this rank's 8-byte put target (in the mapped region) */
} net_t;

/* Progresses until the request completes; 0 on success. */
static int wait_req(net_t* n, void* req) {
  if (req == NULL) return 0;
  if (UCS_PTR_IS_ERR(req)) return -1;
  ucs_status_t st;
  while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(n->worker);
  ucp_request_free(req);
  return st == UCS_OK ? 0 : -1;
}

/* Exchanges a blob with the other of ranks 0 and 1. */
static int swap_blob(MPI_Comm comm, int peer, const void* mine, size_t len, void** theirs) {
  unsigned long long l = len, pl = 0;
  MPI_Sendrecv(&l, 1, MPI_UNSIGNED_LONG_LONG, peer, 71, &pl, 1, MPI_UNSIGNED_LONG_LONG, peer, 71,
               comm, MPI_STATUS_IGNORE);
  *theirs = malloc(pl ? pl : 1);
  if (*theirs == NULL) return -1;
  MPI_Sendrecv(mine, (int)len, MPI_BYTE, peer, 72, *theirs, (int)pl, MPI_BYTE, peer, 72, comm,
               MPI_STATUS_IGNORE);
  return 0;
}

/* Context, worker, endpoint to the peer, a mapped region and the peer's key. */
static const char* net_open(MPI_Comm comm, int peer, uint64_t* region, net_t* n) {
  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA};
  if (ucp_init(&params, NULL, &n->ctx) != UCS_OK) return "ucp_init failed";
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  if (ucp_worker_create(n->ctx, &wp, &n->worker) != UCS_OK) return "ucp_worker_create failed";
  ucp_address_t* addr = NULL;
  size_t alen = 0;
  if (ucp_worker_get_address(n->worker, &addr, &alen) != UCS_OK) return "ucp_worker_get_address failed";
  void* paddr = NULL;
  int bad = swap_blob(comm, peer, addr, alen, &paddr);
  ucp_worker_release_address(n->worker, addr);
  if (bad) return "out of memory";
  ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = paddr};
  ucs_status_t st = ucp_ep_create(n->worker, &ep, &n->ep);
  free(paddr);
  if (st != UCS_OK) return "ucp_ep_create failed";
  ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                             .address = region, .length = 64};
  if (ucp_mem_map(n->ctx, &mp, &n->mem) != UCS_OK) return "ucp_mem_map failed";
  void* packed = NULL;
  size_t plen = 0;
  if (ucp_rkey_pack(n->ctx, n->mem, &packed, &plen) != UCS_OK) return "ucp_rkey_pack failed";
  struct {
    uint64_t addr;
    char key[1024];
  } mine = {(uint64_t)(uintptr_t)region, {0}}, *theirs = NULL;
  if (plen > sizeof(mine.key)) return "packed UCX key too large";
  memcpy(mine.key, packed, plen);
  ucp_rkey_buffer_release(packed);
  if (swap_blob(comm, peer, &mine, sizeof(mine), (void**)&theirs)) return "out of memory";
  st = ucp_ep_rkey_unpack(n->ep, theirs->key, &n->rkey);
  region[1] = theirs->addr; /* where the peer's word is, kept beside ours */
  free(theirs);
  if (st != UCS_OK) return "ucp_ep_rkey_unpack failed";
  n->word = region;
  return NULL;
}

static void net_close(net_t* n) {
  if (n->worker) {
    ucp_request_param_t p = {.op_attr_mask = 0};
    wait_req(n, ucp_worker_flush_nbx(n->worker, &p));
  }
  if (n->rkey) ucp_rkey_destroy(n->rkey);
  if (n->ep) {
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
    wait_req(n, ucp_ep_close_nbx(n->ep, &p));
  }
  if (n->mem) ucp_mem_unmap(n->ctx, n->mem);
  if (n->worker) ucp_worker_destroy(n->worker);
  if (n->ctx) ucp_cleanup(n->ctx);
}

/* Progresses until both requests complete; 0 when both succeeded. */
static int wait_two(net_t* n, void* a, void* b) {
  int bad = UCS_PTR_IS_ERR(a) || UCS_PTR_IS_ERR(b);
  while (!bad && ((a && ucp_request_check_status(a) == UCS_INPROGRESS) ||
                  (b && ucp_request_check_status(b) == UCS_INPROGRESS)))
    ucp_worker_progress(n->worker);
  return bad || wait_req(n, a) || wait_req(n, b);
}

/* Tagged transfer of bytes from rank 0 to rank 1 (both: also from 1 to 0 at
 * once, into the second half of buf): best of three, after one.  Summed over
 * the directions. */
static double ucx_rate(MPI_Comm comm, int rank, net_t* n, char* buf, size_t bytes, int both) {
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    ucp_request_param_t p = {.op_attr_mask = 0}, q = {.op_attr_mask = 0};
    int bad;
    if (both) {
      void* r = ucp_tag_recv_nbx(n->worker, buf + bytes, bytes, 78, ~(ucp_tag_t)0, &q);
      bad = wait_two(n, ucp_tag_send_nbx(n->ep, buf, bytes, 78, &p), r);
    } else {
      bad = rank == 0 ? wait_req(n, ucp_tag_send_nbx(n->ep, buf, bytes, 77, &p))
                      : wait_req(n, ucp_tag_recv_nbx(n->worker, buf, bytes, 77, ~(ucp_tag_t)0, &p));
    }
    /* The receivers have it all. */
    double t = rank == 1 || both ? MPI_Wtime() - t0 : 0, tmax = 0;
    MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, comm);
    int any = bad, anybad = 0;
    MPI_Allreduce(&any, &anybad, 1, MPI_INT, MPI_MAX, comm);
    if (anybad) return -1;
    double gbps = tmax > 0 ? (double)bytes * (both ? 2 : 1) / (tmax * 1e9) : 0;
    if (rep > 0 && gbps > best) best = gbps;
  }
  return best;
}

/* 8-byte puts: rank 0 puts i into rank 1's word and waits for i back. */
static double put_latency(MPI_Comm comm, int rank, net_t* n, uint64_t remote, int iters) {
  uint64_t value = 0;
  ucp_request_param_t p = {.op_attr_mask = 0};
  double t0 = 0;
  for (int i = 1; i <= iters + 100; i++) {
    if (i == 101) {
      MPI_Barrier(comm);
      t0 = MPI_Wtime();
    }
    value = (uint64_t)i;
    if (rank == 1)
      while (*n->word < value) ucp_worker_progress(n->worker);
    /* Waiting for the request frees value for reuse (local completion). */
    if (wait_req(n, ucp_put_nbx(n->ep, &value, sizeof(value), remote, n->rkey, &p))) return -1;
    if (rank == 0)
      while (*n->word < value) ucp_worker_progress(n->worker);
  }
  double t = MPI_Wtime() - t0;
  return t * 1e6 / (2.0 * iters);
}
#endif

void bench_net_measure(MPI_Comm comm, size_t bytes, bench_net_t* out) {
  memset(out, 0, sizeof(*out));
  out->bytes = bytes;
  bench_net_copies(comm, bytes, out);
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
#ifndef BENCH_HAVE_UCX
  snprintf(out->reason, sizeof(out->reason), "the benchmark was built without UCX");
  (void)size;
#else
  double figs[3] = {-1, -1, -1};
  char why[160] = "";
  if (size < 2) snprintf(why, sizeof(why), "one rank: nothing to transfer to");
  MPI_Comm pair = MPI_COMM_NULL;
  MPI_Comm_split(comm, why[0] == '\0' && rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
  if (pair != MPI_COMM_NULL) {
    net_t n;
    memset(&n, 0, sizeof(n));
    uint64_t* region = aligned_alloc(64, 64);
    char* buf = malloc(2 * bytes);
    const char* err = region && buf ? NULL : "out of memory";
    if (err == NULL) {
      memset(region, 0, 64);
      memset(buf, 3, 2 * bytes);
      err = net_open(pair, rank ^ 1, region, &n);
    }
    int bad = err != NULL, anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, pair);
    if (!anybad) {
      figs[0] = ucx_rate(pair, rank, &n, buf, bytes, 0);
      figs[1] = put_latency(pair, rank, &n, region[1], 2000);
      figs[2] = ucx_rate(pair, rank, &n, buf, bytes, 1);
      if (figs[0] < 0 || figs[1] < 0 || figs[2] < 0) err = "a UCX transfer failed";
    } else if (err == NULL) {
      err = "UCX set-up failed on the other rank";
    }
    if (err) snprintf(why, sizeof(why), "%s", err);
    MPI_Barrier(pair);
    net_close(&n);
    free(region);
    free(buf);
    MPI_Comm_free(&pair);
  }
  MPI_Bcast(figs, 3, MPI_DOUBLE, 0, comm);
  MPI_Bcast(why, sizeof(why), MPI_CHAR, 0, comm);
  out->ucx_gbps = figs[0];
  out->put_us = figs[1];
  out->ucx_both_gbps = figs[2];
  snprintf(out->reason, sizeof(out->reason), "%s", why);
  out->measured = why[0] == '\0' && figs[0] > 0 && figs[1] > 0 && figs[2] > 0;
#endif
  double copies = out->d2h_gbps < out->h2d_gbps ? out->d2h_gbps : out->h2d_gbps;
  out->slowest_gbps = !out->measured ? -1 : out->ucx_gbps < copies ? out->ucx_gbps : copies;
  out->slowest_both_gbps = !out->measured ? -1 : out->ucx_both_gbps < copies ? out->ucx_both_gbps : copies;
}
