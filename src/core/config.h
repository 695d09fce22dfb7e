/*
 * config.h - the effective options of a communicator, read from a user's
 * ncclConfig_t as NCCL defines it (magic check, smaller structs from older
 * headers, fields newer than the caller's version treated as unset).
 */
#ifndef MPN_CORE_CONFIG_H_
#define MPN_CORE_CONFIG_H_

#include "nccl.h"

/** The most RMA contexts a communicator may have (a pair carries signals
 *  for that many: p2p/pair.h, MPN_PAIR_RMA_CTX). */
#define MPN_CONFIG_RMA_CTX_MAX 64

/** Options mpinccl acts on; the rest of ncclConfig_t is accepted and ignored. */
typedef struct {
  int blocking;    /**< 1: creation returns when done; 0: returns ncclInProgress */
  int num_rma_ctx; /**< RMA contexts, each with its own signal slots; 0: no one-sided operations */
  int split_share; /**< accepted; resources are never shared between comms */
  int max_p2p_peers;         /**< maxP2pPeers (2.30), 0 when unset */
  int graph_stream_ordering; /**< graphStreamOrdering (2.30.5), 0 when unset */
  char name[64];   /**< commName, for logs */
} mpn_config_t;

/**
 * Fills out from user.  A NULL user gives parent's config when parent is
 * given (ncclCommSplit inherits), else the defaults; fields user leaves
 * unset take the defaults, as NCCL's.
 *
 * @param caller name of the API call, for the error text.
 * @return ncclInvalidArgument with a message for a bad magic, size or value.
 */
ncclResult_t mpn_config_read(const ncclConfig_t* user, const mpn_config_t* parent,
                             const char* caller, mpn_config_t* out);

#endif /* MPN_CORE_CONFIG_H_ */
