/*
 * rma.c - one-sided operations and windows.  Not built in this version:
 * after their argument checks, window registration and the one-sided calls
 * are refused with ncclInvalidUsage and a message.
 */
#include "rma/rma.h"

#include <stdint.h>

#include "core/api.h"
#include "core/comm.h"
#include "core/error.h"

static const char* op_name(mpn_op_kind_t kind) {
  switch (kind) {
    case MPN_OP_PUT_SIGNAL: return "ncclPutSignal";
    case MPN_OP_SIGNAL: return "ncclSignal";
    default: return "ncclWaitSignal";
  }
}

ncclResult_t mpn_rma_launch(struct ncclComm* comm, mpn_op_t* ops) {
  return mpn_error_set(comm, ncclInvalidUsage,
                       "%s: one-sided operations are not available in this version of mpinccl",
                       op_name(ops->kind));
}

MPN_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
        ncclWindow_t* win, int winFlags) {
  const char* fn = "ncclCommWindowRegister";
  MPN_CHECK(mpn_comm_check(comm, fn, 1));
  if (win == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: win is NULL", fn);
  if (buff == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: buff is NULL", fn);
  if (size == 0) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: size is 0", fn);
  if (winFlags & ~(NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING))
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: winFlags 0x%x has unknown bits", fn,
                      winFlags);
  if ((uintptr_t)buff % NCCL_WIN_REQUIRED_ALIGNMENT)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: buff %p is not aligned to NCCL_WIN_REQUIRED_ALIGNMENT (%d bytes)", fn,
                      buff, NCCL_WIN_REQUIRED_ALIGNMENT);
  return MPN_REFUSE(comm, ncclInvalidUsage,
                    "%s: windows are not available in this version of mpinccl", fn);
}

MPN_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  MPN_CHECK(mpn_comm_check(comm, "ncclCommWindowDeregister", 1));
  return MPN_REFUSE(comm, ncclInvalidArgument,
                    "ncclCommWindowDeregister: win %p is not a window of comm %p", (void*)win,
                    (void*)comm);
}

MPN_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  MPN_CHECK(mpn_comm_check(comm, "ncclWinGetUserPtr", 1));
  if (outUserPtr == NULL)
    return MPN_REFUSE(comm, ncclInvalidArgument, "ncclWinGetUserPtr: outUserPtr is NULL");
  return MPN_REFUSE(comm, ncclInvalidArgument,
                    "ncclWinGetUserPtr: win %p is not a window of comm %p", (void*)win,
                    (void*)comm);
}
