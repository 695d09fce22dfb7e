/*
 * test_ucx_local_fail.c - failures of this rank's own on the UCX path, 3
 * ranks (rank 2 only aborts, in the last case), UCX forced, against
 * stand-ins for ucp_tag_recv_nbx and ucp_tag_send_nbx that fail a chosen
 * operation as UCX does when it cannot allocate its request, and for
 * mpn_ucx_proxy_post that refuses a chosen send as when its copy cannot
 * be allocated:
 *  - a receive that failed so (out of memory, on the receiving side): the
 *    receiver's communicator reports ncclSystemError with UCX's reason,
 *    not the ncclRemoteError it reported before; a later receive of the
 *    tag (of another size) is refused instead of taking the message, and
 *    the sender is told that the receiver failed (ncclRemoteError), not
 *    of a size mismatch that stems from that failure.
 *  - a send that failed so in UCX, or that never reached the proxy: the
 *    receiver is told, and its receive of the message, then a later
 *    receive from the sender, end with ncclRemoteError at once (they
 *    waited for good before: the wait here is bounded and says so), its
 *    communicator naming the sender and the message.
 *  - a send that failed in UCX, after which another peer aborts: the
 *    communicator's first error, this rank's own, keeps its code
 *    (ncclSystemError, not the abort's ncclRemoteError); the abort is
 *    mentioned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "mpi_test.h"
#include "mpinccl.h"
#include "ucx/net.h"
#include "ucx/proxy.h"

static int rank;

#define EXPECT(cond) MPI_TEST_EXPECT(cond, #cond, "rank", rank, NULL)

ucs_status_ptr_t __real_ucp_tag_recv_nbx(ucp_worker_h worker, void* buffer, size_t count, ucp_tag_t tag,
                                         ucp_tag_t tag_mask, const ucp_request_param_t* param);

ucs_status_ptr_t __real_ucp_tag_send_nbx(ucp_ep_h ep, const void* buffer, size_t count, ucp_tag_t tag,
                                         const ucp_request_param_t* param);

ncclResult_t __real_mpn_ucx_proxy_post(const mpn_ucx_cmd_t* cmd);

/* A receive (a send) of this tag fails once, with UCS_ERR_NO_MEMORY (0:
 * none); written by the test, read on the proxy thread.  A send of
 * fail_post_tag is refused once by mpn_ucx_proxy_post. */
static uint64_t fail_tag, fail_send_tag, fail_post_tag;

/* Whether an operation of tag is to fail (once) as *armed says. */
static int fails_now(uint64_t* armed_tag, ucp_tag_t tag) {
  uint64_t armed = __atomic_load_n(armed_tag, __ATOMIC_ACQUIRE);
  return armed != 0 && tag == armed &&
         __atomic_compare_exchange_n(armed_tag, &armed, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

ucs_status_ptr_t __wrap_ucp_tag_recv_nbx(ucp_worker_h worker, void* buffer, size_t count, ucp_tag_t tag,
                                         ucp_tag_t tag_mask, const ucp_request_param_t* param) {
  if (fails_now(&fail_tag, tag)) return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
  return __real_ucp_tag_recv_nbx(worker, buffer, count, tag, tag_mask, param);
}

ucs_status_ptr_t __wrap_ucp_tag_send_nbx(ucp_ep_h ep, const void* buffer, size_t count, ucp_tag_t tag,
                                         const ucp_request_param_t* param) {
  if (fails_now(&fail_send_tag, tag)) return UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
  return __real_ucp_tag_send_nbx(ep, buffer, count, tag, param);
}

ncclResult_t __wrap_mpn_ucx_proxy_post(const mpn_ucx_cmd_t* cmd) {
  if (cmd->kind == MPN_UCX_SEND && fails_now(&fail_post_tag, cmd->tag))
    return mpn_error_set(NULL, ncclSystemError, "out of memory"); /* as the real one says it */
  return __real_mpn_ucx_proxy_post(cmd);
}

/* Waits (ms milliseconds at most) until *flag is set: 0, else -1. */
static int wait_flag_ms(const uint64_t* flag, int ms) {
  for (int i = 0; i < ms; i++) {
    if (__atomic_load_n(flag, __ATOMIC_ACQUIRE)) return 0;
    usleep(1000);
  }
  return -1;
}

static int wait_flag(const uint64_t* flag) { return wait_flag_ms(flag, 30000); }

/* Waits (10 s at most) until comm reports an asynchronous error; returns it. */
static ncclResult_t wait_async(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  for (int i = 0; i < 10000 && async == ncclSuccess; i++) {
    EXPECT(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
    if (async == ncclSuccess) usleep(1000);
  }
  return async;
}

/* A 64-byte send (receive) of tag with peer, which fails on this rank
 * (armed: the stand-in's word), as it must: ncclSystemError. */
static void fail_own(ncclComm_t comm, int send, int peer, uint64_t* armed, uint64_t tag) {
  static char mine[64];
  uint64_t done = 0;
  int err = 0;
  __atomic_store_n(armed, tag, __ATOMIC_RELEASE);
  EXPECT(mpn_ucx_tagged_on(comm, send, peer, mine, 64, tag, NULL, NULL, &done, 1, &err, NULL, 0) == ncclSuccess);
  EXPECT(wait_flag(&done) == 0);
  EXPECT(err == ncclSystemError);
}

/* Rank 1's receive of rank 0's 64-byte message fails on rank 1 (out of
 * memory); a 32-byte receive of the same tag must not take that message. */
static void recv_out_of_memory(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  static char buf[64];
  uint64_t tag = mpn_ucx_graph_tag(comm, 0, 1, 3), done = 0, again = 0;
  int err = 0, err2 = 0;
  mpn_error_clear();
  if (rank == 1) fail_own(comm, 0, 0, &fail_tag, tag);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    memset(buf, 7, sizeof(buf));
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, buf, 64, tag, NULL, NULL, &done, 1, &err, NULL, 0) == ncclSuccess);
    EXPECT(wait_flag(&done) == 0);
    ncclResult_t async = wait_async(comm); /* rank 1's notice of its failure */
    const char* text = ncclGetLastError(comm);
    if (async != ncclRemoteError) fprintf(stderr, "[rank 0] reported %s: %s\n", ncclGetErrorString(async), text);
    EXPECT(async == ncclRemoteError);
    EXPECT(strstr(text, "rank 1 failed on its own") != NULL);
  } else if (rank == 1) {
    EXPECT(mpn_ucx_tagged_on(comm, 0, 0, buf, 32, tag, NULL, NULL, &again, 1, &err2, NULL, 0) == ncclSuccess);
    EXPECT(wait_flag(&again) == 0);
    if (err2 != ncclRemoteError) fprintf(stderr, "[rank 1] the later receive: %s\n", ncclGetErrorString(err2));
    EXPECT(err2 == ncclRemoteError); /* refused, not a size mismatch */
    ncclResult_t async = wait_async(comm);
    const char* text = ncclGetLastError(comm);
    if (async != ncclSystemError) fprintf(stderr, "[rank 1] reported %s: %s\n", ncclGetErrorString(async), text);
    EXPECT(async == ncclSystemError);
    EXPECT(strstr(text, "a UCX receive with rank 0 failed: Out of memory (on this rank's side)") != NULL);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT(ncclCommAbort(comm) == ncclSuccess);
}

/* How long rank 1 waits for its receive of a send that failed on rank 0:
 * the notice comes within milliseconds; without it, the receive waits for
 * good (until the abort that ends the case). */
enum { TOLD_WAIT_MS = 5000 };

/* Rank 1's 64-byte receive of tag (posted first) and a later one of
 * later, from rank 0, whose send of tag failed on rank 0: both must end,
 * with ncclRemoteError, and the communicator names rank 0 and the message. */
static void told_of_unsent(ncclComm_t comm, uint64_t* done, const int* err, uint64_t tag, uint64_t later) {
  static char again_buf[64];
  uint64_t again = 0;
  int err2 = 0;
  if (wait_flag_ms(done, TOLD_WAIT_MS) != 0) {
    fprintf(stderr, "[rank 1] the receive of rank 0's failed send still waits after %d ms: rank 1 was not told\n",
            (int)TOLD_WAIT_MS);
    EXPECT(!"the receive of a send that failed on its sender ends");
    return;
  }
  if (*err != ncclRemoteError) fprintf(stderr, "[rank 1] the receive: %s\n", ncclGetErrorString(*err));
  EXPECT(*err == ncclRemoteError);
  EXPECT(mpn_ucx_tagged_on(comm, 0, 0, again_buf, 64, later, NULL, NULL, &again, 1, &err2, NULL, 0) == ncclSuccess);
  EXPECT(wait_flag_ms(&again, TOLD_WAIT_MS) == 0);
  EXPECT(err2 == ncclRemoteError); /* refused: the peer sends nothing more */
  ncclResult_t async = wait_async(comm);
  const char* text = ncclGetLastError(comm);
  char named[128];
  snprintf(named, sizeof(named), "a message of 64 bytes (tag %#llx) to rank 1", (unsigned long long)tag);
  if (async != ncclRemoteError || strstr(text, named) == NULL)
    fprintf(stderr, "[rank 1] reported %s: %s\n", ncclGetErrorString(async), text);
  EXPECT(async == ncclRemoteError);
  EXPECT(strstr(text, "rank 0 failed on its own") != NULL);
  EXPECT(strstr(text, named) != NULL);
}

/* Rank 0's send to rank 1 fails on rank 0 for lack of memory: in UCX
 * (post: 0) or before it reaches the proxy (post: 1, mpn_ucx_proxy_post
 * refuses it).  Rank 1's receive, posted before, must not wait for it. */
static void send_out_of_memory(int post) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  static char buf[64];
  uint64_t tag = mpn_ucx_graph_tag(comm, 0, 1, 7), later = mpn_ucx_graph_tag(comm, 0, 1, 8), done = 0;
  int err = 0;
  mpn_error_clear();
  if (rank == 1)
    EXPECT(mpn_ucx_tagged_on(comm, 0, 0, buf, 64, tag, NULL, NULL, &done, 1, &err, NULL, 0) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0 && !post) {
    fail_own(comm, 1, 1, &fail_send_tag, tag);
    ncclResult_t async = wait_async(comm);
    EXPECT(async == ncclSystemError); /* its own failure, not the peer's */
  } else if (rank == 0) {
    __atomic_store_n(&fail_post_tag, tag, __ATOMIC_RELEASE);
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, buf, 64, tag, NULL, NULL, &done, 1, &err, NULL, 0) == ncclSystemError);
    uint64_t next = 0; /* a later send to rank 1 is refused */
    int err2 = 0;
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, buf, 64, later, NULL, NULL, &next, 1, &err2, NULL, 0) == ncclSuccess);
    EXPECT(wait_flag(&next) == 0);
    EXPECT(err2 != ncclSuccess);
  } else if (rank == 1) {
    told_of_unsent(comm, &done, &err, tag, later);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT(ncclCommAbort(comm) == ncclSuccess);
}

/* Rank 0's send to rank 1 fails on rank 0 (out of memory); rank 2 then
 * aborts.  Rank 0 reads its error once the abort's notice came.  (Rank 1,
 * told of the failed send, fails its side with rank 0: an abort of its
 * would not reach rank 0.) */
static void send_out_of_memory_then_abort(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  uint64_t tag = mpn_ucx_graph_tag(comm, 0, 1, 5);
  mpn_error_clear();
  if (rank == 0) fail_own(comm, 1, 1, &fail_send_tag, tag);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 2) {
    EXPECT(ncclCommAbort(comm) == ncclSuccess);
  } else if (rank == 1) {
    EXPECT(wait_async(comm) == ncclRemoteError); /* told of the send */
  } else {
    int heard = 0;
    for (int i = 0; i < 10000 && !heard; i++) {
      heard = mpn_ucx_peer_aborted(comm, 2);
      if (!heard) usleep(1000);
    }
    EXPECT(heard);
    ncclResult_t async = wait_async(comm);
    const char* text = ncclGetLastError(comm);
    if (async != ncclSystemError) fprintf(stderr, "[rank 0] reported %s: %s\n", ncclGetErrorString(async), text);
    EXPECT(async == ncclSystemError);
    EXPECT(strstr(text, "a UCX send with rank 1 failed: Out of memory (on this rank's side)") != NULL);
    EXPECT(strstr(text, "rank 2 aborted its communicator since") != NULL);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank != 2) EXPECT(ncclCommAbort(comm) == ncclSuccess);
}

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--np-list") == 0) {
    puts("3");
    return 0;
  }
  setenv("MPINCCL_TRANSPORT", "ucx", 1);
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  recv_out_of_memory();
  send_out_of_memory(0);
  send_out_of_memory(1);
  send_out_of_memory_then_abort();
  return mpi_test_finish(rank, "test_ucx_local_fail: ");
}
