/*
 * watchdog.h - notices peers whose process has gone (a crash, a kill) so
 * that nobody waits for them forever: the communicator gets ncclRemoteError
 * through ncclCommGetAsyncError and the streams waiting for the peer are
 * released.
 */
#ifndef MPN_CORE_WATCHDOG_H_
#define MPN_CORE_WATCHDOG_H_

#include <stdint.h>

#include "nccl.h"

struct ncclComm;

/**
 * Makes sure the process's watchdog thread runs (MPINCCL_WATCHDOG_MS > 0)
 * once a communicator has peers in other processes of this host, or over UCX.
 */
ncclResult_t mpn_watchdog_start(const struct ncclComm* comm);

/**
 * Checks comm's same-host peers and its peers over UCX once (the thread
 * calls it for every live communicator); returns the number of peers found
 * gone for the first time.
 */
int mpn_watchdog_check(struct ncclComm* comm);

/**
 * Stops the thread's rounds for good, waiting up to timeout_ms for a round
 * under way to end (done at the process's exit, before CUDA's teardown);
 * returns whether they are stopped (0 where this process runs no thread).
 */
int mpn_watchdog_stop(int64_t timeout_ms);

#endif /* MPN_CORE_WATCHDOG_H_ */
