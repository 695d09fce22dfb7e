/*
 * self.h - a rank's one-sided signals to itself: which of its waits stream
 * order implies, which of its writes may be left out, and what stands in
 * for a write left out (self.c; docs/RMA.md, "A rank's signals to itself").
 */
#ifndef MPN_RMA_SELF_H_
#define MPN_RMA_SELF_H_

#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/enqueue.h"

struct ncclComm;

/**
 * Per context: the rank's signals to itself that are not written.  A
 * launch's plan (mpn_rma_self_plan) sets upto and its stand-in; a signal
 * whose count is at most upto is left out and becomes the last left out
 * (elided), with the plan's stand-in: stand_addr holds stand_value from
 * where that signal stood on its stream.
 */
typedef struct mpn_rma_self {
  uint64_t upto;          /**< counts up to this one, of the launch planned last, are left out */
  CUdeviceptr plan_addr;  /**< that launch's stand-in: a counter its stream writes in the same batch */
  uint64_t plan_value;    /**< the value it writes there */
  uint64_t elided;        /**< the last count left out (0: none) */
  CUdeviceptr stand_addr; /**< the stand-in of that count */
  uint64_t stand_value;
} mpn_rma_self_t;

/** Whether op is a signal of its rank to itself ordered by events (MPS, local.c). */
int mpn_rma_self_local(const mpn_op_t* op);

/**
 * comm's rank's signals to itself on ctx once stream s's of this launch are
 * counted (*sent), and the count its waits on s of this launch reach
 * (*expected).  Valid before any of the launch's signals is counted.
 */
void mpn_rma_self_counts(mpn_op_t** ops, int n, cudaStream_t s, const struct ncclComm* comm, int ctx, uint64_t* sent,
                         uint64_t* expected);

/**
 * Whether a flag kernel on s may poll for descriptor d of wait op, one of
 * the rank's waits for itself under MPS: every signal it needs is enqueued
 * already or comes from the kernel itself.
 */
int mpn_rma_self_wait_syncs(mpn_op_t** ops, int n, cudaStream_t s, const mpn_op_t* op, int d);

/**
 * Whether a kernel stream's signals to its own rank under MPS are all
 * consumed by the same stream's waits of this launch, with no other stream
 * of the launch signalling or waiting for a rank to itself.
 */
int mpn_rma_self_consumed(mpn_op_t** ops, int n, cudaStream_t s);

/**
 * Whether a wait (descriptor d, its count now expected) on the stream whose
 * id is sid, in a batch of memory operations, is for the rank itself and
 * implied by stream order: a signal this stream issued before it reached
 * the count (a signal on another stream than the one before it waits for
 * that one first).  Not for signals ordered by events.
 */
int mpn_rma_self_wait_implied(const struct ncclComm* comm, const ncclWaitSignalDesc_t* d, unsigned long long sid,
                              uint64_t expected);

/**
 * Plans, before stream s's signals of a launch are issued as memory
 * operations, which of its signals to the rank itself are left out: all of
 * them, for a context where no wait of the rank for itself is outstanding,
 * the same stream's waits of the launch consume every one, no other stream
 * of the launch signals or waits for the rank itself, the rank's previous
 * signal to itself there (if any) came from s too, and a signal of s to
 * another rank of the same communicator within the host is written in the
 * same batch to stand in for them.  sid: s's id (0: unknown, nothing left
 * out).
 */
void mpn_rma_self_plan(mpn_op_t** ops, int n, cudaStream_t s, unsigned long long sid);

/** Whether the signal of op, counted as count, is left out (and records it). */
int mpn_rma_self_elide(const mpn_op_t* op, uint64_t count);

/**
 * Where a signal of the rank to itself on another stream than the one
 * before it waits for that one's count (count - 1): the counter itself, or
 * the stand-in of a left-out write.
 */
void mpn_rma_self_order(const mpn_op_t* op, uint64_t count, CUdeviceptr counter, CUdeviceptr* addr, uint64_t* value);

#endif /* MPN_RMA_SELF_H_ */
