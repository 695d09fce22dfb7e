/*
 * error.h - result codes inside mpinccl: the text behind ncclGetLastError and
 * one checking macro per foreign error space (ours, CUDA runtime, MPI, system).
 */
#ifndef MPN_CORE_ERROR_H_
#define MPN_CORE_ERROR_H_

#include <errno.h>
#include <string.h>

#include "core/debug.h"
#include "nccl.h"

struct ncclComm;

/**
 * Records why a call failed: the calling thread's last error, and the
 * communicator's when comm is not NULL (so that ncclGetLastError(comm) finds
 * errors raised by the library's own threads too).  Returns res.
 */
ncclResult_t mpn_error_set(struct ncclComm* comm, ncclResult_t res, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Records text as the calling thread's last error and, comm not NULL,
 *  comm's, as mpn_error_set does (unlogged), comm's error lock held by the
 *  caller: a failure whose code must not be seen before its text
 *  (core/comm.c, mpn_comm_fail_async). */
void mpn_error_record_locked(struct ncclComm* comm, const char* text);

/** Text for ncclGetLastError(comm): the newer of the thread's and comm's. */
const char* mpn_error_last(struct ncclComm* comm);

/** Clears the calling thread's last error. */
void mpn_error_clear(void);

/** Refuses a caller's argument: logs at INFO, records the text, returns code. */
#define MPN_REFUSE(comm, code, ...) mpn_error_set((comm), (code), __VA_ARGS__)

/** Keeps the first failure of a sequence that goes on past failures. */
static inline void mpn_keep(ncclResult_t* first, ncclResult_t res) {
  if (res != ncclSuccess && *first == ncclSuccess) *first = res;
}

/** Propagates a failed ncclResult_t. */
#define MPN_CHECK(call) \
  do { \
    ncclResult_t mpn_res_ = (call); \
    if (mpn_res_ != ncclSuccess && mpn_res_ != ncclInProgress) return mpn_res_; \
  } while (0)

#define MPN_CHECK_GOTO(call, res, label) \
  do { \
    (res) = (call); \
    if ((res) != ncclSuccess && (res) != ncclInProgress) goto label; \
  } while (0)

/** CUDA runtime calls: logs the expression and CUDA's message, and clears
 *  the last error the failed call set (the program's own unread error
 *  stays if the call succeeds). */
#define MPN_CUDA_CHECK(call)                                                                                  \
  do {                                                                                                        \
    cudaError_t mpn_cerr_ = (call);                                                                           \
    if (mpn_cerr_ != cudaSuccess) {                                                                           \
      ncclResult_t mpn_r_ =                                                                                   \
          mpn_error_set(NULL, ncclUnhandledCudaError, "%s failed: %s", #call, cudaGetErrorString(mpn_cerr_)); \
      if (mpn_cerr_ != cudaErrorNotReady) (void)cudaGetLastError(); /* (its own: as mpn_cuda_forget) */       \
      MPN_WARN("%s", mpn_error_last(NULL));                                                                   \
      return mpn_r_;                                                                                          \
    }                                                                                                         \
  } while (0)

/** MPI calls: logs the expression and MPI's error string. */
ncclResult_t mpn_error_mpi(int err, const char* expr);

/** Whether mpn_error_mpi may ask MPI for its error text on this thread
 *  (on by default; off on threads that must not call MPI). */
void mpn_error_mpi_strings(int on);
#define MPN_MPI_CHECK(call) \
  do { \
    int mpn_merr_ = (call); \
    if (mpn_merr_ != 0) return mpn_error_mpi(mpn_merr_, #call); \
  } while (0)
#define MPN_MPI_CHECK_GOTO(call, res, label) \
  do { \
    int mpn_merr_ = (call); \
    if (mpn_merr_ != 0) { \
      (res) = mpn_error_mpi(mpn_merr_, #call); \
      goto label; \
    } \
  } while (0)

/** System calls returning -1 / errno, or pthread calls returning an errno. */
#define MPN_SYS_CHECK(call) \
  do { \
    if ((call) == -1) { \
      ncclResult_t mpn_r_ = \
          mpn_error_set(NULL, ncclSystemError, "%s failed: %s", #call, strerror(errno)); \
      MPN_WARN("%s", mpn_error_last(NULL)); \
      return mpn_r_; \
    } \
  } while (0)
#define MPN_PTHREAD_CHECK(call) \
  do { \
    int mpn_perr_ = (call); \
    if (mpn_perr_ != 0) { \
      ncclResult_t mpn_r_ = \
          mpn_error_set(NULL, ncclSystemError, "%s failed: %s", #call, strerror(mpn_perr_)); \
      MPN_WARN("%s", mpn_error_last(NULL)); \
      return mpn_r_; \
    } \
  } while (0)

/** Memory allocation that fails with a message. */
#define MPN_CALLOC(ptr, n) \
  do { \
    (ptr) = calloc((n), sizeof(*(ptr))); \
    if ((ptr) == NULL) \
      return mpn_error_set(NULL, ncclSystemError, "out of memory allocating %zu x %zu bytes", \
                           (size_t)(n), sizeof(*(ptr))); \
  } while (0)

#endif /* MPN_CORE_ERROR_H_ */
