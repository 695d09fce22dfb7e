/*
 * alias.h - stream handles that name one stream per device: the legacy
 * default stream (NULL or cudaStreamLegacy) and the per-thread default
 * stream (cudaStreamPerThread).  A group that spans communicators on
 * several GPUs may pass such a handle for each of them, and the engines
 * below tell a launch's streams apart by handle.  So, for one launch, the
 * operations of each device but the first move to a stream of their own
 * (forked from the device's default stream by an event, joined back into it
 * after the launch): every handle of the launch then names one stream, and
 * stream order is what the caller asked for.
 */
#ifndef MPN_CORE_ALIAS_H_
#define MPN_CORE_ALIAS_H_

#include <cuda_runtime.h>

#include "core/enqueue.h"
#include "nccl.h"

struct ncclComm;

/** Handles that name one stream per device: NULL, cudaStreamLegacy,
 *  cudaStreamPerThread (a communicator keeps aliases for each). */
#define MPN_ALIAS_HANDLES 3

/** One launch's moved streams (mpn_alias_fork), for mpn_alias_join. */
typedef struct {
  int n;
  struct mpn_alias_move* moves; /**< NULL when nothing moved (the usual case) */
} mpn_alias_t;

/**
 * Moves the ops of both lists that share a per-device handle with ops of
 * another device to an alias stream of the first such op's communicator
 * (one that no other launch holds and that is in no other graph capture;
 * made if there is none), forked after the work the caller enqueued on the
 * handle on that device.  Nothing moves, and nothing is enqueued, in a
 * launch whose per-device handles are each used on one device only.  On
 * failure no op is moved and nothing stays forked.
 */
ncclResult_t mpn_alias_fork(mpn_op_t* lists[2], mpn_alias_t* a);

/**
 * Which ops of both lists mpn_alias_fork would move, in list order (moved[i]
 * for the i-th op, if moved is not NULL): those whose handle names one
 * stream per device and came first with another device.  Returns how many;
 * asks nothing of CUDA.
 */
int mpn_alias_select(mpn_op_t* lists[2], unsigned char* moved);

/** Makes each moved handle's stream wait for the launch's work on its
 *  alias, lets the aliases go and forgets a; the first failure is
 *  returned.  Nothing to do after a fork that moved nothing. */
ncclResult_t mpn_alias_join(mpn_alias_t* a);

/** Frees comm's alias stream and events (its work may still run). */
void mpn_alias_free(struct ncclComm* comm);

#endif /* MPN_CORE_ALIAS_H_ */
