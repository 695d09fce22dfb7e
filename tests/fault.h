/*
 * fault.h - what the fault tests share (tests/hosts/test_hosts_fault.c,
 * tests/gpu/test_fault_*.c): a monotonic clock and the wait for a
 * communicator's asynchronous error after a peer was killed.
 */
#ifndef MPN_TESTS_FAULT_H_
#define MPN_TESTS_FAULT_H_

#include <time.h>
#include <unistd.h>

#include "nccl.h"

static inline double fault_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Polls ncclCommGetAsyncError until it reports something or limit seconds
 * pass; returns what it saw last and, in *seen, after how long. */
static inline ncclResult_t fault_wait_async(ncclComm_t comm, double limit, double* seen) {
  double start = fault_now();
  ncclResult_t async = ncclSuccess;
  while (fault_now() - start < limit) {
    ncclCommGetAsyncError(comm, &async);
    if (async != ncclSuccess) break;
    usleep(10000);
  }
  *seen = fault_now() - start;
  return async;
}

#endif /* MPN_TESTS_FAULT_H_ */
