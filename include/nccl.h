/*
 * nccl.h - the NCCL 2.30 programming interface as provided by mpinccl.
 *
 * Programs written for NCCL compile against this header unchanged.  Values,
 * layouts and signatures follow NCCL 2.30; the declarations are mpinccl's own.
 * Every function is also available under its profiling name (pncclX).
 */
#ifndef NCCL_H_
#define NCCL_H_

#include <cuda_runtime.h>
/* The CUDA types of ncclFloat16, ncclBfloat16 and the fp8 types, as NCCL's
 * header brings them: programs use them after including only nccl.h. */
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 30
#define NCCL_PATCH 7
#define NCCL_SUFFIX "mpinccl"

/* Version codes: X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque communicator handle. */
typedef struct ncclComm* ncclComm_t;
/** Opaque handle of a registered RMA window. */
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
/** Rendezvous token: created by one process, handed to every rank. */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclTimeout = 8,
  ncclNumResults = 9
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f
#define NCCL_API_MAGIC 0xcafebeef

/* Window registration flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_STRICT_ORDERING 0x02
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* CTA policies (accepted, without effect in mpinccl). */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/**
 * Communicator options.  The field order is part of the ABI: programs built
 * against an older header pass a smaller size and an older version.
 */
typedef struct ncclConfig_v23000 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  int graphUsageMode;
  int numRmaCtx;
  int maxP2pPeers;
  int graphStreamOrdering;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                 \
  {                                                                             \
    sizeof(ncclConfig_t),          /* size */                                   \
        NCCL_API_MAGIC,            /* magic */                                  \
        NCCL_VERSION_CODE,         /* version */                                \
        NCCL_CONFIG_UNDEF_INT,     /* blocking */                               \
        NCCL_CONFIG_UNDEF_INT,     /* cgaClusterSize */                         \
        NCCL_CONFIG_UNDEF_INT,     /* minCTAs */                                \
        NCCL_CONFIG_UNDEF_INT,     /* maxCTAs */                                \
        NCCL_CONFIG_UNDEF_PTR,     /* netName */                                \
        NCCL_CONFIG_UNDEF_INT,     /* splitShare */                             \
        NCCL_CONFIG_UNDEF_INT,     /* trafficClass */                           \
        NCCL_CONFIG_UNDEF_PTR,     /* commName */                               \
        NCCL_CONFIG_UNDEF_INT,     /* collnetEnable */                          \
        NCCL_CONFIG_UNDEF_INT,     /* CTAPolicy */                              \
        NCCL_CONFIG_UNDEF_INT,     /* shrinkShare */                            \
        NCCL_CONFIG_UNDEF_INT,     /* nvlsCTAs */                               \
        NCCL_CONFIG_UNDEF_INT,     /* nChannelsPerNetPeer */                    \
        NCCL_CONFIG_UNDEF_INT,     /* nvlinkCentricSched */                     \
        NCCL_CONFIG_UNDEF_INT,     /* graphUsageMode */                         \
        NCCL_CONFIG_UNDEF_INT,     /* numRmaCtx */                              \
        NCCL_CONFIG_UNDEF_INT,     /* maxP2pPeers */                            \
        NCCL_CONFIG_UNDEF_INT      /* graphStreamOrdering */                    \
  }

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Fixes the size of ncclRedOp_t so that ncclMaxRedOp is representable. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/** Filled in by ncclGroupSimulateEnd. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;
#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT }

/** Selectors of ncclCommMemStats. */
typedef enum {
  ncclStatGpuMemSuspend = 0,
  ncclStatGpuMemSuspended = 1,
  ncclStatGpuMemPersist = 2,
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;

#define NCCL_SUSPEND_MEM 0x01

/** One entry of ncclWaitSignal: wait for opCnt signals from peer. */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} ncclWaitSignalDesc_t;

/* Declares ncclX and its profiling twin pncclX with the same signature. */
#define NCCL_DECLARE(ret, name, args) \
  ret name args;                      \
  ret p##name args

/* Library information and errors. */
NCCL_DECLARE(ncclResult_t, ncclGetVersion, (int* version));
NCCL_DECLARE(const char*, ncclGetErrorString, (ncclResult_t result));
NCCL_DECLARE(const char*, ncclGetLastError, (ncclComm_t comm));

/* Communicator creation and queries. */
NCCL_DECLARE(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * uniqueId));
NCCL_DECLARE(ncclResult_t, ncclCommInitRank,
             (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank));
NCCL_DECLARE(ncclResult_t, ncclCommInitRankConfig,
             (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank,
              ncclConfig_t* config));
NCCL_DECLARE(ncclResult_t, ncclCommInitRankScalable,
             (ncclComm_t * newcomm, int nranks, int myrank, int nId,
              ncclUniqueId* commIds, ncclConfig_t* config));
NCCL_DECLARE(ncclResult_t, ncclCommInitAll,
             (ncclComm_t * comms, int ndev, const int* devlist));
NCCL_DECLARE(ncclResult_t, ncclCommSplit,
             (ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
              ncclConfig_t* config));
NCCL_DECLARE(ncclResult_t, ncclCommShrink,
             (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
              ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags));
NCCL_DECLARE(ncclResult_t, ncclCommGrow,
             (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
              ncclComm_t* newcomm, ncclConfig_t* config));
NCCL_DECLARE(ncclResult_t, ncclCommGetUniqueId,
             (ncclComm_t comm, ncclUniqueId * uniqueId));
NCCL_DECLARE(ncclResult_t, ncclCommFinalize, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, ncclCommDestroy, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, ncclCommAbort, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, ncclCommRevoke, (ncclComm_t comm, int revokeFlags));
NCCL_DECLARE(ncclResult_t, ncclCommSuspend, (ncclComm_t comm, int flags));
NCCL_DECLARE(ncclResult_t, ncclCommResume, (ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, ncclCommMemStats,
             (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value));
NCCL_DECLARE(ncclResult_t, ncclCommGetAsyncError,
             (ncclComm_t comm, ncclResult_t * asyncError));
NCCL_DECLARE(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count));
NCCL_DECLARE(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device));
NCCL_DECLARE(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank));
/* Makes the next log message read NCCL_DEBUG, NCCL_DEBUG_SUBSYS and
 * NCCL_DEBUG_FILE again (closing the file opened before). */
NCCL_DECLARE(void, ncclResetDebugInit, (void));

/* Memory and registration. */
NCCL_DECLARE(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size));
NCCL_DECLARE(ncclResult_t, ncclMemFree, (void* ptr));
NCCL_DECLARE(ncclResult_t, ncclCommRegister,
             (const ncclComm_t comm, void* buff, size_t size, void** handle));
NCCL_DECLARE(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle));
NCCL_DECLARE(ncclResult_t, ncclCommWindowRegister,
             (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags));
NCCL_DECLARE(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
NCCL_DECLARE(ncclResult_t, ncclWinGetUserPtr,
             (ncclComm_t comm, ncclWindow_t win, void** outUserPtr));

/* Groups. */
NCCL_DECLARE(ncclResult_t, ncclGroupStart, (void));
NCCL_DECLARE(ncclResult_t, ncclGroupEnd, (void));
NCCL_DECLARE(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t * simInfo));

/* Point to point. */
NCCL_DECLARE(ncclResult_t, ncclSend,
             (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclRecv,
             (void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclComm_t comm, cudaStream_t stream));

/* One-sided operations on registered windows. */
NCCL_DECLARE(ncclResult_t, ncclPutSignal,
             (const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
              ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
              unsigned int flags, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclSignal,
             (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclWaitSignal,
             (int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
              cudaStream_t stream));

/* Collectives. */
NCCL_DECLARE(ncclResult_t, ncclRedOpCreatePreMulSum,
             (ncclRedOp_t * op, void* scalar, ncclDataType_t datatype,
              ncclScalarResidence_t residence, ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));
NCCL_DECLARE(ncclResult_t, ncclReduce,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclBcast,
             (void* buff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclBroadcast,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              int root, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclAllReduce,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclReduceScatter,
             (const void* sendbuff, void* recvbuff, size_t recvcount,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
              cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclAllGather,
             (const void* sendbuff, void* recvbuff, size_t sendcount,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclAlltoAll,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclGather,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              int root, ncclComm_t comm, cudaStream_t stream));
NCCL_DECLARE(ncclResult_t, ncclScatter,
             (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
              int root, ncclComm_t comm, cudaStream_t stream));

#undef NCCL_DECLARE

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
