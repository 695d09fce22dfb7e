/*
 * unsupported.c - the library version, and the NCCL functions present so
 * that programs link, which this version refuses with ncclInvalidUsage and a
 * message naming the call: collectives, elastic communicators, memory
 * statistics and simulation.
 */
#include "core/api.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/group.h"

MPN_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == NULL) return MPN_REFUSE(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

/* Refuses a call this version does not provide. */
/* Refused inside a group too, which then fails as a whole (ncclGroupEnd
 * returns the error and discards the group), as for any refused call. */
static ncclResult_t not_provided(const char* fn, const char* what) {
  return mpn_group_fail(
      MPN_REFUSE(NULL, ncclInvalidUsage, "%s: %s not available in this version of mpinccl", fn, what));
}

#define COLLECTIVE "collectives are"
#define ELASTIC "this communicator operation is"

MPN_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank,
        int nId, ncclUniqueId* commIds, ncclConfig_t* config) {
  (void)newcomm, (void)nranks, (void)myrank, (void)nId, (void)commIds, (void)config;
  return not_provided("ncclCommInitRankScalable", ELASTIC);
}

MPN_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList,
        int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  (void)comm, (void)excludeRanksList, (void)excludeRanksCount, (void)newcomm, (void)config,
      (void)shrinkFlags;
  return not_provided("ncclCommShrink", ELASTIC);
}

MPN_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
        int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  (void)comm, (void)nRanks, (void)uniqueId, (void)rank, (void)newcomm, (void)config;
  return not_provided("ncclCommGrow", ELASTIC);
}

MPN_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId) {
  (void)comm, (void)uniqueId;
  return not_provided("ncclCommGetUniqueId", ELASTIC);
}

MPN_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  (void)comm, (void)revokeFlags;
  return not_provided("ncclCommRevoke", ELASTIC);
}

MPN_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  (void)comm, (void)flags;
  return not_provided("ncclCommSuspend", ELASTIC);
}

MPN_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  (void)comm;
  return not_provided("ncclCommResume", ELASTIC);
}

MPN_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  (void)comm, (void)stat, (void)value;
  return not_provided("ncclCommMemStats", "memory statistics are");
}

/* Ends the group level it would simulate, as NCCL's does: the group then
 * fails and is discarded, instead of staying open for later calls. */
MPN_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  (void)simInfo;
  ncclResult_t res = not_provided("ncclGroupSimulateEnd", "group simulation is");
  if (mpn_group_depth() > 0) (void)pncclGroupEnd();
  return res;
}

MPN_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar,
        ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  (void)op, (void)scalar, (void)datatype, (void)residence, (void)comm;
  return not_provided("ncclRedOpCreatePreMulSum", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  (void)op, (void)comm;
  return not_provided("ncclRedOpDestroy", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)op, (void)root, (void)comm,
      (void)stream;
  return not_provided("ncclReduce", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
        ncclComm_t comm, cudaStream_t stream) {
  (void)buff, (void)count, (void)datatype, (void)root, (void)comm, (void)stream;
  return not_provided("ncclBcast", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)root, (void)comm,
      (void)stream;
  return not_provided("ncclBroadcast", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)op, (void)comm, (void)stream;
  return not_provided("ncclAllReduce", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)recvcount, (void)datatype, (void)op, (void)comm,
      (void)stream;
  return not_provided("ncclReduceScatter", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
        ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)sendcount, (void)datatype, (void)comm, (void)stream;
  return not_provided("ncclAllGather", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
        ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)comm, (void)stream;
  return not_provided("ncclAlltoAll", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)root, (void)comm,
      (void)stream;
  return not_provided("ncclGather", COLLECTIVE);
}

MPN_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  (void)sendbuff, (void)recvbuff, (void)count, (void)datatype, (void)root, (void)comm,
      (void)stream;
  return not_provided("ncclScatter", COLLECTIVE);
}
