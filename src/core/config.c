/*
 * config.c - reading ncclConfig_t compatibly with programs built against
 * older NCCL headers: only the first config->size bytes are touched.
 */
#include "core/config.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"

/* NCCL versions that introduced the last two fields: maxP2pPeers in 2.30.0,
 * graphStreamOrdering in 2.30.5 (NCCL's parseCommConfig resets it below).
 * A 2.30.0-2.30.4 struct has the same size as ours (padded to 8 bytes after
 * maxP2pPeers): the version alone tells that its last 4 bytes are padding. */
#define MPN_CONFIG_V2_30 NCCL_VERSION(2, 30, 0)
#define MPN_CONFIG_V2_30_5 NCCL_VERSION(2, 30, 5)

/* Reads an int field if the caller's struct holds it, else UNDEF. */
static int field_int(const ncclConfig_t* c, size_t offset, unsigned min_version) {
  if (offset + sizeof(int) > c->size || c->version < min_version) return NCCL_CONFIG_UNDEF_INT;
  int v;
  memcpy(&v, (const char*)c + offset, sizeof(v));
  return v;
}

static const char* field_str(const ncclConfig_t* c, size_t offset) {
  if (offset + sizeof(const char*) > c->size) return NULL;
  const char* v;
  memcpy(&v, (const char*)c + offset, sizeof(v));
  return v;
}

#define FIELD_INT(c, f, v) field_int((c), offsetof(ncclConfig_t, f), (v))

/* Fields we do not act on, checked as NCCL checks them (an out-of-range
 * value is ncclInvalidArgument there too), from the NCCL version that
 * introduced each. */
static const struct {
  size_t offset;
  const char* name;
  unsigned version;
  int lo, hi;
} ranges[] = {
    {offsetof(ncclConfig_t, cgaClusterSize), "cgaClusterSize", NCCL_VERSION(2, 17, 0), 0, INT_MAX},
    {offsetof(ncclConfig_t, minCTAs), "minCTAs", NCCL_VERSION(2, 17, 0), 1, INT_MAX},
    {offsetof(ncclConfig_t, maxCTAs), "maxCTAs", NCCL_VERSION(2, 17, 0), 1, INT_MAX},
    {offsetof(ncclConfig_t, splitShare), "splitShare", 0, 0, 1},
    {offsetof(ncclConfig_t, collnetEnable), "collnetEnable", NCCL_VERSION(2, 27, 0), 0, 1},
    {offsetof(ncclConfig_t, CTAPolicy), "CTAPolicy", NCCL_VERSION(2, 27, 0), 0,
     NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO},
    {offsetof(ncclConfig_t, shrinkShare), "shrinkShare", NCCL_VERSION(2, 27, 0), 0, 1},
    {offsetof(ncclConfig_t, nvlsCTAs), "nvlsCTAs", NCCL_VERSION(2, 27, 0), 1, INT_MAX},
    {offsetof(ncclConfig_t, nChannelsPerNetPeer), "nChannelsPerNetPeer", NCCL_VERSION(2, 28, 0), 1, INT_MAX},
    {offsetof(ncclConfig_t, nvlinkCentricSched), "nvlinkCentricSched", NCCL_VERSION(2, 28, 0), 0, 1},
    {offsetof(ncclConfig_t, graphUsageMode), "graphUsageMode", NCCL_VERSION(2, 29, 0), 0, 2},
    {offsetof(ncclConfig_t, maxP2pPeers), "maxP2pPeers", MPN_CONFIG_V2_30, 1, INT_MAX},
    {offsetof(ncclConfig_t, graphStreamOrdering), "graphStreamOrdering", MPN_CONFIG_V2_30_5, 0, 1},
};

static ncclResult_t check_ranges(const ncclConfig_t* user, const char* caller) {
  for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
    int v = field_int(user, ranges[i].offset, ranges[i].version);
    if (v != NCCL_CONFIG_UNDEF_INT && (v < ranges[i].lo || v > ranges[i].hi)) {
      if (ranges[i].hi == INT_MAX)
        return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: config->%s %d is below %d", caller, ranges[i].name, v,
                          ranges[i].lo);
      return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: config->%s %d is not in [%d, %d]", caller, ranges[i].name, v,
                        ranges[i].lo, ranges[i].hi);
    }
  }
  int lo = FIELD_INT(user, minCTAs, NCCL_VERSION(2, 17, 0)), hi = FIELD_INT(user, maxCTAs, NCCL_VERSION(2, 17, 0));
  if (lo != NCCL_CONFIG_UNDEF_INT && hi != NCCL_CONFIG_UNDEF_INT && lo > hi)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: config->minCTAs %d is above config->maxCTAs %d", caller, lo, hi);
  return ncclSuccess;
}

/* NCCL_NUM_RMA_CTX, when set to 0 or more, takes the place of the count
 * the config gave (or the split inherited), for every communicator
 * created, as NCCL's environment override does after its config checks (so
 * a config's count above our bound is refused only if nothing replaces it);
 * a negative value changes nothing. */
static ncclResult_t rma_ctx_env(mpn_config_t* cfg, const char* caller) {
  int64_t env = mpn_param_int(MPN_PARAM_NUM_RMA_CTX);
  if (env < 0) return ncclSuccess;
  if (env > MPN_CONFIG_RMA_CTX_MAX)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: NCCL_NUM_RMA_CTX=%lld is above the %d contexts mpinccl supports",
                      caller, (long long)env, MPN_CONFIG_RMA_CTX_MAX);
  if (env != cfg->num_rma_ctx)
    MPN_INFO(MPN_SUBSYS_ENV, "%s: NCCL_NUM_RMA_CTX=%lld in place of %d one-sided contexts", caller, (long long)env,
             cfg->num_rma_ctx);
  cfg->num_rma_ctx = (int)env;
  return ncclSuccess;
}

static ncclResult_t config_fields(const ncclConfig_t* user, const char* caller, mpn_config_t* out);

ncclResult_t mpn_config_read(const ncclConfig_t* user, const mpn_config_t* parent,
                             const char* caller, mpn_config_t* out) {
  mpn_config_t cfg = {.blocking = 1, .num_rma_ctx = 1, .split_share = 0, .max_p2p_peers = 0, .graph_stream_ordering = 0, .name = ""};
  /* A split without a config inherits its parent's; with one, fields it
   * leaves unset take the defaults, as NCCL's. */
  if (user == NULL && parent) cfg = *parent;
  if (user) MPN_CHECK(config_fields(user, caller, &cfg));
  MPN_CHECK(rma_ctx_env(&cfg, caller));
  if (cfg.num_rma_ctx > MPN_CONFIG_RMA_CTX_MAX)
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: config->numRmaCtx %d is above the %d mpinccl supports", caller,
                      cfg.num_rma_ctx, MPN_CONFIG_RMA_CTX_MAX);
  *out = cfg;
  return ncclSuccess;
}

/* The fields of the caller's config into *out (defaults already there). */
static ncclResult_t config_fields(const ncclConfig_t* user, const char* caller, mpn_config_t* out) {
  mpn_config_t cfg = *out;
  if (user->magic != NCCL_API_MAGIC)
    return MPN_REFUSE(NULL, ncclInvalidArgument,
                      "%s: config->magic 0x%x is not NCCL_API_MAGIC (0x%x); initialize the "
                      "config with NCCL_CONFIG_INITIALIZER",
                      caller, user->magic, NCCL_API_MAGIC);
  if (user->size < offsetof(ncclConfig_t, blocking))
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: config->size %zu is too small", caller,
                      user->size);

  int blocking = FIELD_INT(user, blocking, 0);
  if (blocking != NCCL_CONFIG_UNDEF_INT) {
    if (blocking != 0 && blocking != 1)
      return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: config->blocking %d is not 0 or 1",
                        caller, blocking);
    cfg.blocking = blocking;
  }
  /* As NCCL's: a negative count is refused, 0 leaves the communicator
   * without one-sided operations.  NCCL has no upper bound; a pair here
   * carries signals for at most MPN_CONFIG_RMA_CTX_MAX contexts
   * (p2p/pair.h, MPN_PAIR_RMA_CTX).  The field arrived in 2.29. */
  int ctx = FIELD_INT(user, numRmaCtx, NCCL_VERSION(2, 29, 0));
  if (ctx != NCCL_CONFIG_UNDEF_INT) { /* (above the bound: refused unless NCCL_NUM_RMA_CTX replaces it) */
    if (ctx < 0) return MPN_REFUSE(NULL, ncclInvalidArgument, "%s: config->numRmaCtx %d is negative", caller, ctx);
    cfg.num_rma_ctx = ctx;
  }
  MPN_CHECK(check_ranges(user, caller));
  int share = FIELD_INT(user, splitShare, 0);
  if (share != NCCL_CONFIG_UNDEF_INT) cfg.split_share = share;
  int peers = FIELD_INT(user, maxP2pPeers, MPN_CONFIG_V2_30);
  if (peers != NCCL_CONFIG_UNDEF_INT) cfg.max_p2p_peers = peers;
  int ordering = FIELD_INT(user, graphStreamOrdering, MPN_CONFIG_V2_30_5);
  if (ordering != NCCL_CONFIG_UNDEF_INT) cfg.graph_stream_ordering = ordering;
  const char* name = field_str(user, offsetof(ncclConfig_t, commName));
  if (name) snprintf(cfg.name, sizeof(cfg.name), "%s", name);
  *out = cfg;
  return ncclSuccess;
}
