/*
 * nccl_facts.c - prints the interface facts a program compiled against NCCL
 * relies on (values, sizes, field offsets), one "name value" line each.
 * test_nccl_header.sh builds it against our nccl.h and against NVIDIA's and
 * compares the facts both print; facts newer than a header's version are left
 * out for it.
 */
#include <stddef.h>
#include <stdio.h>

#include NCCL_HEADER

#define FACT(expr) printf("%s %lld\n", #expr, (long long)(expr))
#define FIELD(type, field) \
  printf("offsetof(%s,%s) %zu size %zu\n", #type, #field, offsetof(type, field), sizeof(((type*)0)->field))

static void results(void) {
  FACT(ncclSuccess);
  FACT(ncclUnhandledCudaError);
  FACT(ncclSystemError);
  FACT(ncclInternalError);
  FACT(ncclInvalidArgument);
  FACT(ncclInvalidUsage);
  FACT(ncclRemoteError);
  FACT(ncclInProgress);
  FACT(sizeof(ncclResult_t));
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  FACT(ncclTimeout);
  FACT(ncclNumResults);
#endif
}

static void types(void) {
  FACT(ncclInt8);
  FACT(ncclChar);
  FACT(ncclUint8);
  FACT(ncclInt32);
  FACT(ncclInt);
  FACT(ncclUint32);
  FACT(ncclInt64);
  FACT(ncclUint64);
  FACT(ncclFloat16);
  FACT(ncclHalf);
  FACT(ncclFloat32);
  FACT(ncclFloat);
  FACT(ncclFloat64);
  FACT(ncclDouble);
  FACT(ncclBfloat16);
  FACT(ncclFloat8e4m3);
  FACT(ncclFloat8e5m2);
  FACT(ncclNumTypes);
  FACT(sizeof(ncclDataType_t));
  FACT(ncclSum);
  FACT(ncclProd);
  FACT(ncclMax);
  FACT(ncclMin);
  FACT(ncclAvg);
  FACT(ncclNumOps);
  FACT(ncclMaxRedOp);
  FACT(sizeof(ncclRedOp_t));
}

static void constants(void) {
  FACT(NCCL_MAJOR);
  FACT(NCCL_VERSION(2, 8, 4));
  FACT(NCCL_VERSION(2, 30, 7));
  FACT(NCCL_UNIQUE_ID_BYTES);
  FACT(sizeof(ncclUniqueId));
  FACT(NCCL_CONFIG_UNDEF_INT);
  FACT(NCCL_CONFIG_UNDEF_PTR == NULL);
  FACT(NCCL_SPLIT_NOCOLOR);
  FACT(NCCL_UNDEF_FLOAT * 1000);
#ifdef NCCL_API_MAGIC
  FACT(NCCL_API_MAGIC);
#endif
  FACT(NCCL_WIN_DEFAULT);
  FACT(NCCL_WIN_COLL_SYMMETRIC);
  FACT(NCCL_WIN_REQUIRED_ALIGNMENT);
  FACT(NCCL_CTA_POLICY_DEFAULT);
  FACT(NCCL_CTA_POLICY_EFFICIENCY);
  FACT(NCCL_CTA_POLICY_ZERO);
  FACT(sizeof(ncclComm_t));
  FACT(sizeof(ncclWindow_t));
#ifdef NCCL_WIN_STRICT_ORDERING
  FACT(NCCL_WIN_STRICT_ORDERING);
#endif
}

static void config(void) {
  FIELD(ncclConfig_t, size);
  FIELD(ncclConfig_t, magic);
  FIELD(ncclConfig_t, version);
  FIELD(ncclConfig_t, blocking);
  FIELD(ncclConfig_t, cgaClusterSize);
  FIELD(ncclConfig_t, minCTAs);
  FIELD(ncclConfig_t, maxCTAs);
  FIELD(ncclConfig_t, netName);
  FIELD(ncclConfig_t, splitShare);
  FIELD(ncclConfig_t, trafficClass);
  FIELD(ncclConfig_t, commName);
  FIELD(ncclConfig_t, collnetEnable);
  FIELD(ncclConfig_t, CTAPolicy);
  FIELD(ncclConfig_t, shrinkShare);
  FIELD(ncclConfig_t, nvlsCTAs);
  FIELD(ncclConfig_t, nChannelsPerNetPeer);
  FIELD(ncclConfig_t, nvlinkCentricSched);
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  FACT(c.size == sizeof(ncclConfig_t));
  FACT(c.magic);
  FACT(c.version == NCCL_VERSION_CODE);
  FACT(c.blocking);
  FACT(c.netName == NULL);
  FACT(c.nvlinkCentricSched);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 29, 0)
  FIELD(ncclConfig_t, graphUsageMode);
  FIELD(ncclConfig_t, numRmaCtx);
  FACT(c.numRmaCtx);
  FIELD(ncclWaitSignalDesc_t, opCnt);
  FIELD(ncclWaitSignalDesc_t, peer);
  FIELD(ncclWaitSignalDesc_t, sigIdx);
  FIELD(ncclWaitSignalDesc_t, ctx);
  FACT(sizeof(ncclWaitSignalDesc_t));
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 30, 0)
  FIELD(ncclConfig_t, maxP2pPeers);
  FIELD(ncclConfig_t, graphStreamOrdering);
  FACT(c.graphStreamOrdering);
#endif
}

int main(void) {
  results();
  types();
  constants();
  config();
  return 0;
}
