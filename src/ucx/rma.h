/*
 * rma.h - one-sided transfers of host memory over UCX (see rma.c).
 */
#ifndef MPN_UCX_RMA_H_
#define MPN_UCX_RMA_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "ucx/net.h"
#include "ucx/proxy.h"

struct ncclComm;
typedef struct mpn_ucx_region mpn_ucx_region_t;

/**
 * Maps bytes of host memory at base for remote access by the communicator's
 * UCX peers and hands every rank the others' keys.  Collective over comm;
 * fails on every rank if it fails on one (base NULL: this rank failed
 * before, and takes part only to tell the others).
 */
ncclResult_t mpn_ucx_region_register(struct ncclComm* comm, void* base, size_t bytes,
                                     mpn_ucx_region_t** out);

/** Not collective: unmaps and frees the region at once (the communicator
 * is going away and its UCX work was closed). */
void mpn_ucx_region_free(mpn_ucx_region_t* region);

/** Leaks the peers' keys the proxy unpacked for the region: they must go
 * before their endpoints, and those were closed (an abort). */
void mpn_ucx_region_forget_keys(mpn_ucx_region_t* region);

/** peer's part of the region, as a put names it. */
mpn_ucx_remote_t* mpn_ucx_region_remote(mpn_ucx_region_t* region, int peer);

/**
 * Collective: unmaps the region.  Every put of this rank into or with it
 * must have completed (its flag set) before: the keys go with it.
 */
ncclResult_t mpn_ucx_region_deregister(struct ncclComm* comm, mpn_ucx_region_t* region);

/**
 * Puts bytes from buf into peer's part of dst at dst_offset, then adds 1 to
 * the 64-bit counter at signal_offset in peer's part of signal, which the
 * peer sees change only after the data.  Returns at once; *flag becomes
 * value once both are remotely complete (buf may be reused), *error an
 * ncclResult_t if the peer cannot be reached.
 */
ncclResult_t mpn_ucx_host_put_signal(struct ncclComm* comm, int peer, const void* buf, size_t bytes,
                                     mpn_ucx_region_t* dst, size_t dst_offset,
                                     mpn_ucx_region_t* signal, size_t signal_offset,
                                     uint64_t* flag, uint64_t value, int* error);

/** mpn_ucx_host_put_signal, started when the trigger comes (see mpn_ucx_trigger_t). */
ncclResult_t mpn_ucx_host_put_signal_on(struct ncclComm* comm, int peer, const void* buf,
                                        size_t bytes, mpn_ucx_region_t* dst, size_t dst_offset,
                                        mpn_ucx_region_t* signal, size_t signal_offset,
                                        const mpn_ucx_trigger_t* when, uint64_t* flag,
                                        uint64_t value, int* error);

#endif /* MPN_UCX_RMA_H_ */
