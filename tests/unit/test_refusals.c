/*
 * test_refusals.c - bad input to the public API, as a program would pass
 * it, on communicators of this process (host-only without a GPU): each is
 * refused with a result code and a text naming the call, the argument and
 * the value; calls on finalized, destroyed, aborted and failed
 * communicators; and what a group may not hold.
 */
#include <check.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/group.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "refusal.h"
#include "run_suite.h"

#define ARG ncclInvalidArgument
#define USAGE ncclInvalidUsage

START_TEST(creation_arguments) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one(), other = NULL;
  ncclUniqueId id, zero;
  memset(&zero, 0, sizeof(zero)); /* an id a rank never received */
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t small = NCCL_CONFIG_INITIALIZER, odd = NCCL_CONFIG_INITIALIZER, magic = NCCL_CONFIG_INITIALIZER;
  small.size = 8;
  odd.blocking = -1;
  magic.magic = 1;
  int minus_one[1] = {-1};
  REFUSED(comm, ncclGetUniqueId(NULL), ARG, "uniqueId is NULL");
  REFUSED(comm, ncclCommInitRank(NULL, 1, id, 0), ARG, "newcomm is NULL");
  REFUSED(comm, ncclCommInitRank(&other, -3, id, 0), ARG, "nranks -3 is not positive");
  REFUSED(comm, ncclCommInitRank(&other, 2, id, -1), ARG, "rank -1 out of range [0, 2)");
  REFUSED(comm, ncclCommInitRank(&other, 1, zero, 0), ARG, "commId was not made by ncclGetUniqueId");
  REFUSED(comm, ncclCommInitRankConfig(&other, 1, id, 0, &small), ARG, "config->size 8 is too small");
  REFUSED(comm, ncclCommInitRankConfig(&other, 1, id, 0, &odd), ARG, "config->blocking -1 is not 0 or 1");
  REFUSED(comm, ncclCommInitAll(&other, 1, minus_one), ARG, "devlist[0] = -1 is not a CUDA device");
  if (comm->cuda_dev < 0) /* no device at all: device 0 is not one either */
    REFUSED(comm, ncclCommInitAll(&other, 1, NULL), ARG, "device[0] = 0 is not a CUDA device [0, 0)");
  ck_assert_ptr_null(other);
  REFUSED(comm, ncclCommSplit(NULL, 0, 0, &other, NULL), ARG, "comm is NULL");
  REFUSED(comm, ncclCommSplit(comm, 0, 0, NULL, NULL), ARG, "newcomm is NULL");
  REFUSED(comm, ncclCommSplit(comm, INT_MIN, 0, &other, NULL), ARG,
          "color -2147483648 is negative and not NCCL_SPLIT_NOCOLOR");
  REFUSED(comm, ncclCommSplit(comm, 0, 0, &other, &magic), ARG, "config->magic 0x1 is not NCCL_API_MAGIC");
  REFUSED(comm, ncclCommSplit(comm, 0, 0, &other, &odd), ARG, "config->blocking -1 is not 0 or 1");
  ck_assert_ptr_null(other);
  MPI_Comm mpi = MPI_COMM_NULL;
  int inited = 0;
  MPI_Initialized(&inited);
  REFUSED(comm, mpincclCommInitMPI(NULL, MPI_COMM_WORLD, NULL), ARG, "comm is NULL");
  REFUSED(comm, mpincclCommInitMPI(&other, MPI_COMM_NULL, NULL), ARG, "mpicomm is MPI_COMM_NULL");
  if (!inited) REFUSED(comm, mpincclCommInitMPI(&other, MPI_COMM_WORLD, NULL), USAGE, "MPI is not initialized");
  REFUSED(comm, mpincclCommGetMPIComm(NULL, &mpi), ARG, "comm is NULL");
  REFUSED(comm, mpincclCommGetMPIComm(comm, NULL), ARG, "mpicomm is NULL");
  REFUSED(comm, mpincclCommGetMPIComm(comm, &mpi), USAGE, "was made from a unique id");
  ck_assert(mpi == MPI_COMM_NULL);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(query_arguments) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  ncclResult_t async;
  int n;
  REFUSED(comm, ncclCommFinalize(NULL), ARG, "comm is NULL");
  REFUSED(comm, ncclCommGetAsyncError(NULL, &async), ARG, "comm is NULL");
  REFUSED(comm, ncclCommGetAsyncError(comm, NULL), ARG, "asyncError is NULL");
  REFUSED(comm, ncclCommCount(NULL, &n), ARG, "comm is NULL");
  REFUSED(comm, ncclCommUserRank(comm, NULL), ARG, "rank is NULL");
  REFUSED(comm, ncclCommCuDevice(comm, NULL), ARG, "device is NULL");
  /* Any pointer is safe to ask about: one that is no communicator gives the thread's text. */
  int junk = 0;
  ck_assert_str_eq(ncclGetLastError((ncclComm_t)&junk), "ncclCommCuDevice: device is NULL");
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(send_recv_arguments) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[64] = {0};
  REFUSED(comm, ncclSend(buf, 1, (ncclDataType_t)-1, 0, comm, NULL), ARG,
          "datatype -1 is not a valid ncclDataType_t [0, 12)");
  REFUSED(comm, ncclSend(buf, 1, ncclNumTypes, 0, comm, NULL), ARG, "datatype 12 is not a valid ncclDataType_t");
  REFUSED(comm, ncclSend(buf, SIZE_MAX / 4 + 1, ncclInt32, 0, comm, NULL), ARG,
          "count 4611686018427387904 of ncclInt32 overflows size_t");
  REFUSED(comm, ncclRecv(NULL, 1, ncclInt8, 0, comm, NULL), ARG, "recvbuff is NULL with count 1");
  REFUSED(comm, ncclRecv(buf, 1, ncclInt8, -1, comm, NULL), ARG, "peer -1 out of range [0, 1)");
  REFUSED(comm, ncclRecv(buf, 1, ncclInt8, -3, comm, NULL), ARG, "peer -3 out of range [0, 1) (or MPINCCL_PROC_NULL)");
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* The one-sided calls' own arguments (NCCL_API.md lists what NCCL's enqueue refuses). */
START_TEST(one_sided_arguments) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[64] = {0};
  ncclWindow_t win = (ncclWindow_t)buf; /* never reached: refused before */
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 0, 0, 0, NULL, NULL), ARG, "comm is NULL");
  REFUSED(comm, ncclPutSignal(buf, 1, (ncclDataType_t)-2, 0, win, 0, 0, 0, 0, comm, NULL), ARG, "datatype -2");
  REFUSED(comm, ncclPutSignal(buf, SIZE_MAX, ncclInt32, 0, win, 0, 0, 0, 0, comm, NULL), ARG,
          "count 18446744073709551615 of ncclInt32 overflows size_t");
  REFUSED(comm, ncclPutSignal(NULL, 1, ncclInt8, 0, win, 0, 0, 0, 0, comm, NULL), ARG,
          "localbuff is NULL with count 1");
  REFUSED(comm, ncclPutSignal(buf, 8, ncclInt8, 0, win, SIZE_MAX - 2, 0, 0, 0, comm, NULL), ARG,
          "peerWinOffset 18446744073709551613 + 8 bytes overflows size_t");
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, -1, 0, 0, comm, NULL), ARG, "sigIdx -1 is not 0");
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 0, -1, 0, comm, NULL), ARG, "ctx -1 out of range [0, 1)");
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, -1, win, 0, 0, 0, 0, comm, NULL), ARG, "peer -1 out of range [0, 1)");
  /* MPINCCL_PROC_NULL is a peer for ncclSend and ncclRecv only. */
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, MPINCCL_PROC_NULL, win, 0, 0, 0, 0, comm, NULL), ARG,
          "peer -2 out of range [0, 1)");
  REFUSED(comm, ncclSignal(0, 0, 0, 0, NULL, NULL), ARG, "comm is NULL");
  REFUSED(comm, ncclSignal(0, 3, 0, 0, comm, NULL), ARG, "sigIdx 3 is not 0");
  REFUSED(comm, ncclSignal(0, 0, -1, 0, comm, NULL), ARG, "ctx -1 out of range [0, 1)");
  REFUSED(comm, ncclSignal(-1, 0, 0, 0, comm, NULL), ARG, "peer -1 out of range [0, 1)");
  REFUSED(comm, ncclSignal(0, 0, 0, 0x80000000u, comm, NULL), ARG, "flags 0x80000000 is not 0");
  ncclWaitSignalDesc_t d[2] = {{1, 0, 0, 0}, {1, 0, 0, 0}};
  REFUSED(comm, ncclWaitSignal(1, d, NULL, NULL), ARG, "comm is NULL");
  REFUSED(comm, ncclWaitSignal(-1, d, comm, NULL), ARG, "nDesc -1 is not positive");
  /* A bad field in a later descriptor, named with its index. */
  static const struct {
    ncclWaitSignalDesc_t desc;
    const char* text;
  } bad[] = {
      {{-5, 0, 0, 0}, "signalDescs[1].opCnt -5 is not positive"},
      {{1, 9, 0, 0}, "signalDescs[1]: peer 9 out of range [0, 1)"},
      {{1, -1, 0, 0}, "signalDescs[1]: peer -1 out of range [0, 1)"},
      {{1, 0, 2, 0}, "signalDescs[1]: sigIdx 2 is not 0"},
      {{1, 0, 0, -1}, "signalDescs[1]: ctx -1 out of range [0, 1)"},
      {{1, 0, 0, 1}, "signalDescs[1]: ctx 1 out of range [0, 1)"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    d[1] = bad[i].desc;
    REFUSED(comm, ncclWaitSignal(2, d, comm, NULL), ARG, bad[i].text);
  }
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(registration_arguments) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[64] = {0};
  void* aligned = (void*)(uintptr_t)NCCL_WIN_REQUIRED_ALIGNMENT; /* never dereferenced */
  void *handle = NULL, *user = NULL;
  ncclWindow_t win = NULL;
  REFUSED(comm, ncclCommRegister(NULL, buf, 8, &handle), ARG, "comm is NULL");
  REFUSED(comm, ncclCommRegister(comm, NULL, 8, &handle), ARG, "buff is NULL");
  REFUSED(comm, ncclCommRegister(comm, buf, 0, &handle), ARG, "size is 0");
  REFUSED(comm, ncclCommRegister(comm, buf, 8, NULL), ARG, "handle is NULL");
  REFUSED(comm, ncclCommDeregister(NULL, buf), ARG, "comm is NULL");
  /* NULL: success, as NCCL (whose ncclCommRegister may hand out NULL) */
  ck_assert_int_eq(ncclCommDeregister(comm, NULL), ncclSuccess);
  win = (ncclWindow_t)buf; /* every refusal leaves NULL there, the comm's own too */
  REFUSED(comm, ncclCommWindowRegister(NULL, aligned, 4096, &win, 0), ARG, "comm is NULL");
  ck_assert_ptr_null(win);
  REFUSED(comm, ncclCommWindowRegister(comm, aligned, 4096, NULL, 0), ARG, "win is NULL");
  REFUSED(comm, ncclCommWindowRegister(comm, aligned, 0, &win, 0), ARG, "size is 0");
  REFUSED(comm, ncclCommWindowRegister(comm, aligned, 4096, &win, 0x10), ARG, "winFlags 0x10 has unknown bits");
  REFUSED(comm, ncclCommWindowRegister(comm, aligned, 4096, &win, -1), ARG, "winFlags 0xffffffff has unknown bits");
  if (comm->cuda_dev < 0)
    REFUSED(comm, ncclCommWindowRegister(comm, aligned, 4096, &win, 0), USAGE, "has no CUDA device");
  ck_assert_ptr_null(win);
  REFUSED(comm, ncclCommWindowDeregister(NULL, (ncclWindow_t)buf), ARG, "comm is NULL");
  REFUSED(comm, ncclCommWindowDeregister(NULL, NULL), ARG, "comm is NULL");
  ck_assert_int_eq(ncclCommWindowDeregister(comm, NULL), ncclSuccess); /* as NCCL: nothing to deregister */
  REFUSED(comm, ncclWinGetUserPtr(NULL, (ncclWindow_t)buf, &user), ARG, "comm is NULL");
  REFUSED(comm, ncclWinGetUserPtr(comm, NULL, &user), ARG, "win (nil) is not a window of comm");
  REFUSED(comm, ncclWinGetUserPtr(comm, (ncclWindow_t)buf, NULL), ARG, "outUserPtr is NULL");
  ck_assert_ptr_null(user);
  /* A put names its own argument, peerWin (it said "win").  Given a device,
   * a comm without a GPU gets past the device check to the window's. */
  int dev = comm->cuda_dev;
  comm->cuda_dev = dev < 0 ? 0 : dev;
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, 0, (ncclWindow_t)buf, 0, 0, 0, 0, comm, NULL), ARG,
          "ncclPutSignal: peerWin 0x");
  comm->cuda_dev = dev;
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* A handle deregistered is refused when given again, also after a new
 * registration (on its communicator or another): the new one's handle
 * was the freed one's address, so the stale handle took the new
 * registration away, and the new handle was then refused. */
START_TEST(deregistration_twice) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one(), other = comm_of_one();
  char buf[64] = {0};
  void *first = NULL, *second = NULL, *elsewhere = NULL;
  ck_assert_int_eq(ncclCommRegister(comm, buf, 8, &first), ncclSuccess);
  ck_assert_int_eq(ncclCommDeregister(comm, first), ncclSuccess);
  ck_assert_int_eq(ncclCommRegister(comm, buf, 8, &second), ncclSuccess);
  REFUSED(comm, ncclCommDeregister(comm, first), ARG, "was not returned by ncclCommRegister on comm");
  ck_assert_int_eq(ncclCommDeregister(comm, second), ncclSuccess);
  ck_assert_int_eq(ncclCommRegister(other, buf, 8, &elsewhere), ncclSuccess);
  REFUSED(comm, ncclCommDeregister(other, second), ARG, "was not returned by ncclCommRegister on comm");
  ck_assert_int_eq(ncclCommDeregister(other, elsewhere), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(other), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* The result of a non-blocking creation, once it is no longer in progress
 * (ncclCommGetAsyncError polled). */
static ncclResult_t creation_result(ncclComm_t comm) {
  ncclResult_t state;
  do {
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  } while (state == ncclInProgress);
  return state;
}

/* Every call that needs a working communicator, on one that is closed:
 * finalized (ncclInvalidUsage, "was finalized") or gone, destroyed or
 * aborted (ncclInvalidArgument; the handle is looked up, never
 * dereferenced).  A finalized one still answers ncclCommGetAsyncError and
 * the queries (ncclCommCount, ...), and may be deregistered from, destroyed
 * or aborted. */
static void closed_calls(ncclComm_t comm, int gone) {
  ncclResult_t code = gone ? ARG : USAGE;
  const char* text = gone ? "is not a live communicator" : "was finalized";
  char buf[64] = {0};
  ncclWindow_t win = (ncclWindow_t)buf, made = NULL;
  ncclWaitSignalDesc_t d = {1, 0, 0, 0};
  ncclComm_t other = NULL;
  void *handle = NULL, *user = NULL;
  int n;
  MPI_Comm mpi;
  REFUSED(comm, ncclSend(buf, 1, ncclInt8, 0, comm, NULL), code, text);
  REFUSED(comm, ncclRecv(buf, 1, ncclInt8, 0, comm, NULL), code, text);
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 0, 0, 0, comm, NULL), code, text);
  REFUSED(comm, ncclSignal(0, 0, 0, 0, comm, NULL), code, text);
  REFUSED(comm, ncclWaitSignal(1, &d, comm, NULL), code, text);
  REFUSED(comm, ncclCommSplit(comm, 0, 0, &other, NULL), code, text);
  REFUSED(comm, ncclCommRegister(comm, buf, 8, &handle), code, text);
  REFUSED(comm, ncclCommWindowRegister(comm, buf, 4096, &made, 0), code, text);
  REFUSED(comm, ncclCommWindowDeregister(comm, win), code, text);
  if (gone) REFUSED(comm, ncclCommWindowDeregister(comm, NULL), code, text);
  REFUSED(comm, ncclCommFinalize(comm), code, text);
  ck_assert_ptr_null(other);
  ck_assert_ptr_null(made);
  if (!gone) { /* the queries still answer, as NCCL's do once a finalize is done */
    ck_assert_int_eq(ncclCommWindowDeregister(comm, NULL), ncclSuccess); /* (nothing to deregister) */
    ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ncclCommUserRank(comm, &n), ncclSuccess);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(ncclCommCuDevice(comm, &n), ncclSuccess);
    REFUSED(comm, ncclWinGetUserPtr(comm, win, &user), ARG, "is not a window of comm");
    REFUSED(comm, mpincclCommGetMPIComm(comm, &mpi), USAGE, "made from a unique id");
    return;
  }
  REFUSED(comm, ncclWinGetUserPtr(comm, win, &user), code, text);
  REFUSED(comm, ncclCommCount(comm, &n), code, text);
  REFUSED(comm, ncclCommUserRank(comm, &n), code, text);
  REFUSED(comm, ncclCommCuDevice(comm, &n), code, text);
  REFUSED(comm, mpincclCommGetMPIComm(comm, &mpi), code, text);
  ncclResult_t async;
  REFUSED(comm, ncclCommGetAsyncError(comm, &async), code, text);
  REFUSED(comm, ncclCommDeregister(comm, buf), code, text);
  REFUSED(comm, ncclCommDestroy(comm), code, text);
  REFUSED(comm, ncclCommAbort(comm), code, text);
}

START_TEST(calls_on_closed_comms) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  void* handle = NULL;
  char buf[8] = {0};
  ck_assert_int_eq(ncclCommRegister(comm, buf, sizeof(buf), &handle), ncclSuccess);
  ck_assert_int_eq(ncclCommFinalize(comm), ncclSuccess);
  closed_calls(comm, 0);
  ncclResult_t async = ncclInternalError;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSuccess);
  ck_assert_int_eq(ncclCommDeregister(comm, handle), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  closed_calls(comm, 1);
  comm = comm_of_one();
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
  closed_calls(comm, 1);
}
END_TEST

/* The same on a non-blocking communicator once finalized: every call is
 * refused at once, the window calls too, also inside a group, and the
 * finalize's result stays ncclSuccess.  The window calls returned
 * ncclInProgress there and ran in the background, whose refusal then
 * became the communicator's asynchronous error (ncclInvalidUsage from
 * ncclCommGetAsyncError after a finalize that had succeeded). */
START_TEST(calls_on_closed_nonblocking_comm) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclResult_t made = ncclCommInitRankConfig(&comm, 1, id, 0, &cfg);
  ck_assert(made == ncclSuccess || made == ncclInProgress);
  ck_assert_int_eq(creation_result(comm), ncclSuccess);
  made = ncclCommFinalize(comm);
  ck_assert(made == ncclSuccess || made == ncclInProgress);
  ck_assert_int_eq(creation_result(comm), ncclSuccess); /* (the finalize's, polled as a creation's) */
  closed_calls(comm, 0);
  char buf[64] = {0};
  ncclWindow_t win = (ncclWindow_t)buf;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  REFUSED(comm, ncclCommWindowRegister(comm, buf, 4096, &win, 0), USAGE, "was finalized");
  REFUSED(comm, ncclCommWindowDeregister(comm, (ncclWindow_t)buf), USAGE, "was finalized");
  ck_assert_int_eq(ncclGroupEnd(), USAGE); /* (with the first refusal's text) */
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclCommWindowRegister: comm"));
  ck_assert_ptr_null(win);
  ncclResult_t async = ncclInternalError;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_msg(async == ncclSuccess, "the finalized communicator reports %d: \"%s\"", async, ncclGetLastError(comm));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* A unique id of the in-process bootstrap. */
static ncclUniqueId local_id(void) {
  use_local_bootstrap();
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  return id;
}

/* Starts rank's non-blocking creation of nranks on id (in the background). */
static void begin_nonblocking(ncclComm_t* comm, ncclUniqueId id, int nranks, int rank) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ck_assert_int_eq(ncclCommInitRankConfig(comm, nranks, id, rank, &cfg), ncclInProgress);
}

/* A non-blocking creation that failed (here: the ranks disagree on
 * nranks) leaves a handle that reports why and refuses work until it is
 * destroyed. */
START_TEST(calls_on_failed_comm) {
  ncclUniqueId id = local_id();
  ncclComm_t comms[2] = {NULL, NULL};
  begin_nonblocking(&comms[0], id, 2, 0);
  begin_nonblocking(&comms[1], id, 3, 1);
  char buf[8] = {0};
  int n;
  for (int i = 0; i < 2; i++) ck_assert_int_eq(creation_result(comms[i]), ncclInvalidArgument);
  /* (before any refusal on this thread: the newer text is the thread's) */
  for (int i = 0; i < 2; i++)
    ck_assert_msg(strstr(ncclGetLastError(comms[i]), "disagree on nranks") != NULL, "%s", ncclGetLastError(comms[i]));
  for (int i = 0; i < 2; i++) {
    /* (the creation's own error, as NCCL passes it on) */
    REFUSED(comms[i], ncclSend(buf, 1, ncclInt8, 0, comms[i], NULL), ARG, "failed during creation (invalid argument");
    REFUSED(comms[i], ncclCommCount(comms[i], &n), ARG, "failed during creation");
    /* (at once, as on a blocking one: not in the background, which answered ncclInProgress) */
    ncclWindow_t win = (ncclWindow_t)buf;
    REFUSED(comms[i], ncclCommWindowRegister(comms[i], buf, 4096, &win, 0), ARG, "failed during creation");
    ck_assert_ptr_null(win);
    ck_assert_int_eq(ncclCommWindowDeregister(comms[i], NULL), ncclSuccess); /* (nothing to deregister) */
    ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
  }
}
END_TEST

/* A NULL window given to ncclCommWindowDeregister is nothing to
 * deregister, as NCCL's, whatever the communicator's state: only the
 * handle is checked (above, finalized or failed ones too).  On a
 * non-blocking communicator still being created it was refused ("still
 * being created", ncclInvalidArgument) and failed the caller's group,
 * while window calls on it are queued until it is made. */
START_TEST(null_window_while_created) {
  ncclUniqueId id = local_id();
  ncclComm_t comms[2] = {NULL, NULL};
  begin_nonblocking(&comms[0], id, 2, 0);
  /* (rank 0's creation waits for rank 1, not there yet) */
  ck_assert_int_eq(ncclCommWindowDeregister(comms[0], NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowDeregister(comms[0], NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ncclResult_t async = ncclInternalError;
  ck_assert_int_eq(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclInProgress);
  begin_nonblocking(&comms[1], id, 2, 1);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(creation_result(comms[i]), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
}
END_TEST

/* Ranks whose numRmaCtx differ (each context has its own signal counters,
 * laid out alike on both sides of a pair): the creation fails on both,
 * naming the two values. */
START_TEST(rma_contexts_disagree) {
  use_local_bootstrap();
  ncclUniqueId id;
  ncclComm_t comms[2] = {NULL, NULL};
  ncclConfig_t cfg[2] = {NCCL_CONFIG_INITIALIZER, NCCL_CONFIG_INITIALIZER};
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  for (int i = 0; i < 2; i++) {
    cfg[i].blocking = 0;
    cfg[i].numRmaCtx = i + 1;
    ck_assert_int_eq(ncclCommInitRankConfig(&comms[i], 2, id, i, &cfg[i]), ncclInProgress);
  }
  for (int i = 0; i < 2; i++) {
    ck_assert_int_eq(creation_result(comms[i]), ncclInvalidArgument);
    ck_assert_msg(strstr(ncclGetLastError(comms[i]), "rank 0 has numRmaCtx 1, rank 1 has 2") != NULL, "%s",
                  ncclGetLastError(comms[i]));
  }
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
}
END_TEST

/* A communicator whose peer was found gone or aborted (the watchdog, a
 * peer's abort, UCX) refuses further data calls with that error, as NCCL
 * refuses them on a communicator with an asynchronous error: the flags
 * shared with the peer are released, so they would complete with no data.
 * Queries and ncclCommGetAsyncError still answer; abort ends it.  An error
 * that leaves the peers in step (a mismatch, a buffer a peer refused)
 * leaves it usable, and stays its asynchronous error, the first; the
 * refusals name the peer's failure, the first of those. */
START_TEST(calls_after_peer_failed) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  char buf[64] = {0};
  ncclWindow_t win = (ncclWindow_t)buf;
  ncclWaitSignalDesc_t d = {1, 0, 0, 0};
  ck_assert(mpn_comm_fail_async(comm, ncclInvalidUsage, "message 5 from rank 0 to rank 3: a size mismatch"));
  ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, MPINCCL_PROC_NULL, comm, NULL), ncclSuccess);
  mpn_comm_set_broken(comm, ncclRemoteError, "rank 3 (process 42 on node7) is gone");
  const char* text =
      "has failed (a peer failed or the network reported an error: rank 3 (process 42 on node7) is gone)";
  REFUSED(comm, ncclSend(buf, 1, ncclInt8, 0, comm, NULL), ncclRemoteError, text);
  REFUSED(comm, ncclRecv(buf, 1, ncclInt8, 0, comm, NULL), ncclRemoteError, text);
  REFUSED(comm, ncclPutSignal(buf, 1, ncclInt8, 0, win, 0, 0, 0, 0, comm, NULL), ncclRemoteError, text);
  REFUSED(comm, ncclSignal(0, 0, 0, 0, comm, NULL), ncclRemoteError, text);
  REFUSED(comm, ncclWaitSignal(1, &d, comm, NULL), ncclRemoteError, "abort it (ncclCommAbort)");
  int n = 0;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
  ck_assert_int_eq(n, 1);
  ncclResult_t async = ncclSuccess;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclInvalidUsage);
  mpn_comm_set_broken(comm, ncclTimeout, "a later failure"); /* (the first peer failure's code and text stay) */
  REFUSED(comm, ncclSend(buf, 1, ncclInt8, 0, comm, NULL), ncclRemoteError, text);
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  ck_assert_int_eq(async, ncclInvalidUsage);
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
}
END_TEST

/*
 * Finalizing a communicator that the open group still has to make a
 * window for, or split, is refused as destroying it is: at ncclGroupEnd
 * the job found it finalized, and a window registration then left its
 * peers waiting in the collective.  Operations of the group on a
 * communicator finalized since their call fail the group: nothing is
 * enqueued after finalize returned (they were launched on it; without a
 * GPU the launch then refused them for want of a device).
 */
START_TEST(finalize_with_open_group) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one(), sub = NULL;
  ncclWindow_t win = NULL;
  char buf[8] = {0};
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowRegister(comm, NULL, 4096, &win, 0), ncclSuccess); /* checked at ncclGroupEnd */
  REFUSED(comm, ncclCommFinalize(comm), USAGE, "call ncclGroupEnd first");
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "ncclCommWindowRegister: buff is NULL"));
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &sub, NULL), ncclSuccess);
  REFUSED(comm, ncclCommFinalize(comm), USAGE, "call ncclGroupEnd first");
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(sub), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclSend(buf, 1, ncclInt8, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclRecv(buf, 1, ncclInt8, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclCommFinalize(comm), ncclSuccess);
  REFUSED(comm, ncclGroupEnd(), USAGE, "was finalized or aborted after its operations were enqueued");
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Groups nest at most MPN_GROUP_MAX_DEPTH deep: the next ncclGroupStart
 * is refused (a loop that misses its ncclGroupEnd), and the group fails
 * as a whole; the count never overflows. */
START_TEST(group_nesting_limit) {
  int refused = 0; /* (counted: an assertion per call would cost a write each) */
  for (int i = 0; i < MPN_GROUP_MAX_DEPTH; i++) refused += ncclGroupStart() != ncclSuccess;
  ck_assert_int_eq(refused, 0);
  REFUSED(NULL, ncclGroupStart(), USAGE, "groups are nested 1048576 deep already");
  for (int i = 1; i < MPN_GROUP_MAX_DEPTH; i++) refused += ncclGroupEnd() != ncclSuccess;
  ck_assert_int_eq(refused, 0);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "nested 1048576 deep"));
  REFUSED(NULL, ncclGroupEnd(), USAGE, "no ncclGroupStart is open");
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess); /* a new group is fine */
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
}
END_TEST

int main(void) {
  const TTest* tests[] = {creation_arguments,
                          query_arguments,
                          send_recv_arguments,
                          one_sided_arguments,
                          registration_arguments,
                          calls_on_closed_comms,
                          calls_on_closed_nonblocking_comm,
                          calls_on_failed_comm,
                          null_window_while_created,
                          rma_contexts_disagree,
                          calls_after_peer_failed,
                          finalize_with_open_group,
                          group_nesting_limit,
                          deregistration_twice};
  Suite* s = suite_create("refusals");
  TCase* tc = tcase_create("refusals");
  tcase_set_timeout(tc, 60);
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) tcase_add_test(tc, tests[i]);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
