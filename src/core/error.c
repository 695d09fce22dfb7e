/*
 * error.c - per-thread and per-communicator error text for ncclGetLastError,
 * and the strings of ncclGetErrorString.
 */
#include "core/error.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>

#include "core/api.h"
#include "core/comm.h"

#define MPN_ERROR_TEXT 512

static __thread char thread_text[MPN_ERROR_TEXT];
static __thread unsigned long thread_seq;
static __thread char returned_text[MPN_ERROR_TEXT];
static unsigned long error_seq; /* orders thread and communicator texts */

void mpn_error_record_locked(struct ncclComm* comm, const char* text) {
  unsigned long seq = __atomic_add_fetch(&error_seq, 1, __ATOMIC_RELAXED);
  snprintf(thread_text, sizeof(thread_text), "%s", text);
  thread_seq = seq;
  if (comm != NULL) {
    snprintf(comm->error_text, sizeof(comm->error_text), "%s", text);
    comm->error_seq = seq;
  }
}

ncclResult_t mpn_error_set(struct ncclComm* comm, ncclResult_t res, const char* fmt, ...) {
  char text[MPN_ERROR_TEXT];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  if (comm != NULL) pthread_mutex_lock(&comm->error_lock);
  mpn_error_record_locked(comm, text);
  if (comm != NULL) pthread_mutex_unlock(&comm->error_lock);
  MPN_INFO(MPN_SUBSYS_ALL, "%s: %s", ncclGetErrorString(res), text);
  return res;
}

const char* mpn_error_last(struct ncclComm* comm) {
  /* Held, not only found live: an abort of another thread frees comm only
   * once this read let go of it. */
  if (comm != NULL && mpn_comm_hold(comm)) {
    pthread_mutex_lock(&comm->error_lock);
    int newer = comm->error_seq > thread_seq;
    if (newer) memcpy(returned_text, comm->error_text, sizeof(returned_text));
    pthread_mutex_unlock(&comm->error_lock);
    mpn_comm_release(comm);
    if (newer) return returned_text;
  }
  return thread_text;
}

void mpn_error_clear(void) {
  thread_text[0] = '\0';
  thread_seq = 0;
}

/* Off on threads that must not call MPI (bootstrap/channel.c's workers). */
static __thread int mpi_strings_off;

void mpn_error_mpi_strings(int on) { mpi_strings_off = !on; }

ncclResult_t mpn_error_mpi(int err, const char* expr) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (mpi_strings_off || MPI_Error_string(err, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof(msg), "MPI error code %d", err);
  ncclResult_t res = mpn_error_set(NULL, ncclSystemError, "%s failed: %s", expr, msg);
  MPN_WARN("%s", mpn_error_last(NULL));
  return res;
}

MPN_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "success";
    case ncclUnhandledCudaError: return "a CUDA call failed (NCCL_DEBUG=WARN shows which)";
    case ncclSystemError: return "a system or MPI call failed (NCCL_DEBUG=WARN shows which)";
    case ncclInternalError: return "internal error in mpinccl (please report it)";
    case ncclInvalidArgument: return "invalid argument (ncclGetLastError names it)";
    case ncclInvalidUsage: return "invalid usage (ncclGetLastError says why)";
    case ncclRemoteError: return "a peer failed or the network reported an error";
    case ncclInProgress: return "operation in progress";
    case ncclTimeout: return "operation timed out";
    default: return "unknown result code";
  }
}

MPN_API(const char*, ncclGetLastError, ncclComm_t comm) { return mpn_error_last(comm); }
