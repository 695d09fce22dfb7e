/*
 * local.h - one-sided signals between ranks of one process under MPS,
 * ordered with CUDA events instead of stream memory waits (see local.c).
 */
#ifndef MPN_RMA_LOCAL_H_
#define MPN_RMA_LOCAL_H_

#include <cuda_runtime.h>
#include <stdint.h>

struct ncclComm;
struct mpn_pair;

/** Whether signals between comm's rank and peer go through events. */
int mpn_rma_local(const struct ncclComm* comm, int peer, int graph);

/** Signaller: count was reached where stream s now stands (after the puts). */
void mpn_rma_local_publish(struct mpn_pair* pair, int ctx, uint64_t count, cudaStream_t s, int dev);

/**
 * Waiter: makes stream s wait for the sender's count reaching expected;
 * 0 when no event came in time (the caller then waits for the counter).
 */
int mpn_rma_local_wait(struct mpn_pair* pair, int ctx, uint64_t expected, cudaStream_t s);

/** Waiter that polls the counter instead: gives back the entries up to expected. */
void mpn_rma_local_drop(struct mpn_pair* pair, int ctx, uint64_t expected);

#endif /* MPN_RMA_LOCAL_H_ */
