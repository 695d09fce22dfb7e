/*
 * ucx_probe.h - what the UCX library in use can do, found once per process
 * when a communicator first has a peer on the UCX transport.
 */
#ifndef MPN_UCX_PROBE_H_
#define MPN_UCX_PROBE_H_

#include "nccl.h"

typedef struct {
  unsigned major, minor, release; /**< UCX version */
  int cuda_memory;                /**< UCX can access CUDA device memory */
} mpn_ucx_caps_t;

/**
 * Creates a UCX context with the features the transport needs (RMA, 64-bit
 * atomics, active messages), reads its capabilities and releases it.  The
 * result is cached.  ncclSystemError when UCX cannot start.
 */
ncclResult_t mpn_ucx_probe(mpn_ucx_caps_t* caps);

#endif /* MPN_UCX_PROBE_H_ */
