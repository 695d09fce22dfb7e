/*
 * prefix.h - the 24-bit tag prefixes of this process's live UCX
 * communicators: the candidates a communicator tries, and the registry that
 * keeps two communicators sharing this process (and so its worker) apart.
 */
#ifndef MPN_UCX_PREFIX_H_
#define MPN_UCX_PREFIX_H_

#include <stdint.h>

#include "nccl.h"

/** Bits of a tag prefix: UCX tags carry it above their other 40 bits. */
#define MPN_UCX_PREFIX_BITS 24

/**
 * The prefix a communicator of bootstrap key key tries at attempt (0, 1,
 * ...): attempt 0 folds the key as tags always have; later attempts mix key
 * and attempt, so that two keys which met at one attempt part at the next.
 * Pure: every rank of the communicator derives the same sequence.
 */
uint32_t mpn_ucx_prefix_candidate(uint64_t key, int attempt);

/**
 * Takes prefix for the communicator of bootstrap key key, unless another
 * key holds it in this process, or freed it among the last
 * MPN_UCX_PREFIX_RECENT freed: then *taken = 1 and nothing is held.  The
 * same key may hold a prefix several times (ranks of one communicator in
 * one process); each hold takes its own release.  Check and take are one
 * step under a lock.  ncclSystemError when out of memory.
 */
ncclResult_t mpn_ucx_prefix_reserve(uint32_t prefix, uint64_t key, int* taken);

/** How many of the prefixes freed last stay refused to other keys: a freed
 *  communicator's messages it never received stay in the worker. */
#define MPN_UCX_PREFIX_RECENT 256

/** Lets go of one hold of prefix by key (mpn_ucx_prefix_reserve); the
 *  last one frees the prefix, for other keys once MPN_UCX_PREFIX_RECENT
 *  more have been freed. */
void mpn_ucx_prefix_release(uint32_t prefix, uint64_t key);

#endif /* MPN_UCX_PREFIX_H_ */
