/*
 * register.c - ncclCommRegister/ncclCommDeregister.  Registration is a hint
 * in mpinccl: every exportable buffer is sent zero-copy through the IPC
 * cache whether registered or not.  The calls check their arguments and
 * hand out handles that belong to one communicator, so a handle given to the
 * wrong communicator or released twice is refused.
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/api.h"
#include "core/comm.h"
#include "core/error.h"

struct mpn_reg {
  struct mpn_reg* next;
  void* buff;
  size_t size;
  uintptr_t handle; /* what the program holds */
};

/* Handles are numbers the process never hands out twice, not the records'
 * addresses: malloc gives a freed record's address to the next one, so a
 * handle released twice, or released and given to another communicator,
 * named a newer registration and took it away. */
static uintptr_t last_handle;

MPN_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
        void** handle) {
  const char* fn = "ncclCommRegister";
  MPN_CHECK(mpn_comm_check(comm, fn, 1));
  if (buff == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: buff is NULL", fn);
  if (size == 0) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: size is 0", fn);
  if (handle == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: handle is NULL", fn);
  struct mpn_reg* reg = malloc(sizeof(*reg));
  if (reg == NULL) return mpn_error_set(comm, ncclSystemError, "out of memory");
  reg->buff = buff;
  reg->size = size;
  reg->handle = __atomic_add_fetch(&last_handle, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&comm->error_lock);
  reg->next = comm->registrations;
  comm->registrations = reg;
  pthread_mutex_unlock(&comm->error_lock);
  *handle = (void*)reg->handle;
  return ncclSuccess;
}

MPN_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  const char* fn = "ncclCommDeregister";
  MPN_CHECK(mpn_comm_check(comm, fn, 0));
  /* NCCL returns success for NULL: its ncclCommRegister hands out NULL where
   * it registers nothing, so portable clean-up passes such handles back. */
  if (handle == NULL) return ncclSuccess;
  /* Found by value only: a stale handle is never dereferenced. */
  pthread_mutex_lock(&comm->error_lock);
  struct mpn_reg** p = &comm->registrations;
  while (*p && (void*)(*p)->handle != handle) p = &(*p)->next;
  struct mpn_reg* reg = *p;
  if (reg) *p = reg->next;
  pthread_mutex_unlock(&comm->error_lock);
  if (reg == NULL)
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: handle %p was not returned by ncclCommRegister on comm %p", fn, handle,
                      (void*)comm);
  free(reg);
  return ncclSuccess;
}

void mpn_comm_free_registrations(struct ncclComm* comm) {
  while (comm->registrations) {
    struct mpn_reg* next = comm->registrations->next;
    free(comm->registrations);
    comm->registrations = next;
  }
}
