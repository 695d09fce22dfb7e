/*
 * rma.c - one-sided transfers of host memory over UCX: regions mapped with
 * ucp_mem_map whose keys every rank of the communicator receives when the
 * region is registered (collectively), and a put whose signal, an atomic add
 * on a counter in another region of the peer, becomes visible only after
 * the data (put, fence, add).  Context-level UCX calls run on the proxy
 * thread, like every other UCX call.  Device windows are mirrored in such
 * regions where UCX cannot reach device memory (winstage.c).
 */
#include "ucx/rma.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "transport.h"
#include "ucx/net_comm.h"
#include "ucx/proxy.h"

#define MPN_UCX_RKEY_MAX 2048

struct mpn_ucx_region {
  void* base;
  size_t bytes;
  ucp_mem_h memh;
  void* packed; /* this rank's packed key */
  size_t packed_len;
  int nranks;
  mpn_ucx_remote_t* remote; /* per peer; addr 0 for peers not on UCX */
  uint64_t* remote_bytes;
  char* keys;               /* the peers' packed keys, backing remote[].packed */
  ucs_status_t status;      /* of the last call on the proxy thread */
};

static void map_on_proxy(void* arg) {
  mpn_ucx_region_t* r = arg;
  ucp_mem_map_params_t params = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                               UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                                 .address = r->base,
                                 .length = r->bytes};
  ucp_context_h ctx = mpn_ucx_proxy_context();
  r->status = ucp_mem_map(ctx, &params, &r->memh);
  if (r->status == UCS_OK) r->status = ucp_rkey_pack(ctx, r->memh, &r->packed, &r->packed_len);
}

static void unmap_on_proxy(void* arg) {
  mpn_ucx_region_t* r = arg;
  for (int p = 0; r->remote && p < r->nranks; p++)
    if (r->remote[p].rkey) ucp_rkey_destroy(r->remote[p].rkey);
  if (r->packed) ucp_rkey_buffer_release(r->packed);
  if (r->memh) ucp_mem_unmap(mpn_ucx_proxy_context(), r->memh);
}

typedef struct {
  uint64_t addr, bytes;
  uint32_t len;
  char key[MPN_UCX_RKEY_MAX];
} key_slot_t;

void mpn_ucx_region_free(mpn_ucx_region_t* r) {
  /* A call the proxy did not take up in time never runs: the mapping and
   * the keys stay, r may go.  Nothing mapped (a registration that failed
   * first), nothing to ask: the proxy may never have started (UCX could
   * not start), and the call would wait MPINCCL_BOOTSTRAP_TIMEOUT for it.
   * (Keys and the packed key come only with a mapping.) */
  if (r->memh != NULL && mpn_ucx_proxy_call(unmap_on_proxy, r) != ncclSuccess)
    MPN_WARN("UCX: %zu bytes at %p stay mapped (the proxy thread did not answer)", r->bytes, r->base);
  free(r->remote);
  free(r->remote_bytes);
  free(r->keys);
  free(r);
}

ncclResult_t mpn_ucx_region_register(struct ncclComm* comm, void* base, size_t bytes,
                                     mpn_ucx_region_t** out) {
  *out = NULL;
  if (!mpn_ucx_comm_ready(comm))
    return mpn_error_set(comm, ncclInvalidUsage, "communicator %p has no UCX peers", (void*)comm);
  /* This rank may have no UCX peer of its own: the proxy must run anyway. */
  const void* addr;
  size_t addr_len;
  ncclResult_t started = mpn_ucx_proxy_start(NULL, &addr, &addr_len);
  mpn_ucx_region_t* r = calloc(1, sizeof(*r));
  key_slot_t* slots = calloc((size_t)comm->nranks, sizeof(*slots));
  ncclResult_t res = r && slots ? started : mpn_error_set(comm, ncclSystemError, "out of memory");
  if (res == ncclSuccess && base == NULL) res = ncclInternalError; /* reported by the caller */
  if (res == ncclSuccess) {
    *r = (mpn_ucx_region_t){.base = base, .bytes = bytes, .nranks = comm->nranks};
    res = mpn_ucx_proxy_call(map_on_proxy, r);
  }
  if (res == ncclSuccess && r->status != UCS_OK)
    res = mpn_error_set(comm, ncclSystemError, "UCX could not map %zu bytes at %p: %s", bytes, base,
                        ucs_status_string(r->status));
  if (res == ncclSuccess && r->packed_len > MPN_UCX_RKEY_MAX)
    res = mpn_error_set(comm, ncclInternalError, "UCX key of %zu bytes is too long", r->packed_len);
  key_slot_t* mine = slots ? &slots[comm->rank] : NULL;
  if (res == ncclSuccess) {
    *mine = (key_slot_t){.addr = (uint64_t)(uintptr_t)base, .bytes = bytes, .len = (uint32_t)r->packed_len};
    memcpy(mine->key, r->packed, r->packed_len);
  }
  /* Every rank takes part, failed or not: a zero length says "failed".
   * One with nothing to take part with leaves the collectives instead. */
  ncclResult_t gathered = slots ? mpn_bootstrap_allgather(comm->bootstrap, slots, sizeof(*slots))
                                : mpn_bootstrap_fail(comm->bootstrap, res);
  if (res == ncclSuccess) res = gathered;
  for (int p = 0; p < comm->nranks && res == ncclSuccess; p++)
    if (slots[p].len == 0)
      res = mpn_error_set(comm, ncclSystemError, "rank %d could not map its UCX region", p);
  if (res == ncclSuccess) {
    r->remote = calloc((size_t)comm->nranks, sizeof(*r->remote));
    r->remote_bytes = calloc((size_t)comm->nranks, sizeof(uint64_t));
    r->keys = malloc((size_t)comm->nranks * MPN_UCX_RKEY_MAX);
    if (!r->remote || !r->remote_bytes || !r->keys) res = mpn_error_set(comm, ncclSystemError, "out of memory");
  }
  for (int p = 0; p < comm->nranks && res == ncclSuccess; p++) {
    char* key = r->keys + (size_t)p * MPN_UCX_RKEY_MAX;
    memcpy(key, slots[p].key, slots[p].len);
    r->remote[p] = (mpn_ucx_remote_t){.addr = slots[p].addr, .packed = key};
    r->remote_bytes[p] = slots[p].bytes;
  }
  free(slots);
  if (res != ncclSuccess) {
    if (r) mpn_ucx_region_free(r);
    return res;
  }
  *out = r;
  return ncclSuccess;
}

void mpn_ucx_region_forget_keys(mpn_ucx_region_t* r) {
  for (int p = 0; r->remote && p < r->nranks; p++) r->remote[p].rkey = NULL;
}

mpn_ucx_remote_t* mpn_ucx_region_remote(mpn_ucx_region_t* region, int peer) {
  return &region->remote[peer];
}

ncclResult_t mpn_ucx_region_deregister(struct ncclComm* comm, mpn_ucx_region_t* r) {
  /* Collective: no peer may still put into it. */
  ncclResult_t res = mpn_bootstrap_barrier(comm->bootstrap);
  mpn_ucx_region_free(r);
  return res;
}

ncclResult_t mpn_ucx_host_put_signal(struct ncclComm* comm, int peer, const void* buf, size_t bytes,
                                     mpn_ucx_region_t* dst, size_t dst_offset,
                                     mpn_ucx_region_t* signal, size_t signal_offset,
                                     uint64_t* flag, uint64_t value, int* error) {
  return mpn_ucx_host_put_signal_on(comm, peer, buf, bytes, dst, dst_offset, signal, signal_offset,
                                    NULL, flag, value, error);
}

ncclResult_t mpn_ucx_host_put_signal_on(struct ncclComm* comm, int peer, const void* buf,
                                        size_t bytes, mpn_ucx_region_t* dst, size_t dst_offset,
                                        mpn_ucx_region_t* signal, size_t signal_offset,
                                        const mpn_ucx_trigger_t* when, uint64_t* flag,
                                        uint64_t value, int* error) {
  mpn_ucx_peer_t* p = mpn_ucx_comm_peer(comm, peer);
  if (p == NULL)
    return mpn_error_set(comm, ncclInvalidUsage, "rank %d is not a UCX peer of rank %d", peer, comm->rank);
  if (dst_offset > dst->remote_bytes[peer] || bytes > dst->remote_bytes[peer] - dst_offset)
    return mpn_error_set(comm, ncclInvalidArgument,
                         "put of %zu bytes at offset %zu runs past the end of rank %d's region "
                         "(%llu bytes)",
                         bytes, dst_offset, peer, (unsigned long long)dst->remote_bytes[peer]);
  if (signal_offset % 8 || signal_offset > signal->remote_bytes[peer] || signal->remote_bytes[peer] - signal_offset < 8)
    return mpn_error_set(comm, ncclInvalidArgument,
                         "signal offset %zu is not an aligned counter inside rank %d's region "
                         "(%llu bytes)",
                         signal_offset, peer, (unsigned long long)signal->remote_bytes[peer]);
  mpn_ucx_cmd_t cmd = {.kind = MPN_UCX_PUT_SIGNAL,
                       .owner = comm->ucx,
                       .peer = p,
                       .buf = (void*)buf,
                       .bytes = bytes,
                       .flag = flag,
                       .value = value,
                       .error = error,
                       .owner_error = mpn_ucx_comm_error(comm),
                       .failure = mpn_ucx_comm_failure(comm),
                       .from = peer,
                       .dst = &dst->remote[peer],
                       .dst_offset = dst_offset,
                       .signal = &signal->remote[peer],
                       .signal_offset = signal_offset,
                       .trigger = when ? when->word : NULL,
                       .trigger_value = when ? when->value : 0};
  return mpn_ucx_proxy_post(&cmd);
}
