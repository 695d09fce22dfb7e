/*
 * test_peer_left_calls.c - the calls naming a peer that ended its
 * communicator normally and exited (MPN_PEER_LEFT; docs/P2P.md, known
 * problem 19), on the host: a wait passes for signals the peer sent, a
 * receive takes a message the peer left in this process's inbox, and what
 * asks for more is refused (src/core/enqueue.c, src/p2p/left.c,
 * src/rma/left.c).  Two ranks of this process; rank 0's pairs with rank 1
 * are mapped in host memory with a made-up device block (the CUDA calls of
 * the mapping are stand-ins, --wrap), the peer's record of its end and its
 * message are written into them as its process would, and the watchdog's
 * mark is set by hand.  Nothing is launched (no GPU here): every group
 * ends with a refused call, so ncclGroupEnd enqueues nothing.
 * tests/gpu/test_peer_left runs the same on a GPU, with real processes.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/comm.h"
#include "local_comm.h"
#include "p2p/eager.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"
#include "run_suite.h"

#define HOST_PAIRS_MAPPING
#define HOST_PAIRS_BLOCK
#include "host_pairs.h"
/* While set, the pairs mapped get a device block (flags and inbox) on a
 * made-up device 0: the block host_pairs.h makes. */
static int fake_device;
cudaError_t __real_cudaGetDevice(int* dev);
cudaError_t __wrap_cudaGetDevice(int* dev) {
  if (!fake_device) return __real_cudaGetDevice(dev);
  *dev = 0;
  return cudaSuccess;
}
cudaError_t __real_cudaFree(void* ptr);
cudaError_t __wrap_cudaFree(void* ptr) { return ptr == FAKE_BLOCK ? cudaSuccess : __real_cudaFree(ptr); }

/* Rank 0 of a communicator of two whose rank 1 ended it after posting
 * `posted` messages to rank 0, each through the inbox ring `inbox`
 * (eager.h) or not, and sending it `signals` signals on ctx 0. */
typedef struct {
  ncclComm_t comms[2];
  mpn_pair_t *send, *recv; /* rank 0 -> 1, 1 -> 0: made here, as a block's owner */
} left_t;

static void left_setup(left_t* t, uint64_t posted, int inbox, uint64_t signals) {
  use_local_bootstrap();
  set_param("MPINCCL_EAGER_GRAPH", "0");
  set_param("MPINCCL_FLAGS", "device");
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommInitRank(&t->comms[i], 2, id, i), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  fake_device = 1;
  ck_assert_int_eq(mpn_p2p_pairs(t->comms[0], 1, &t->send, &t->recv), ncclSuccess);
  fake_device = 0;
  ck_assert(t->recv->created && t->recv->dflags == (CUdeviceptr)(uintptr_t)FAKE_BLOCK);
  for (uint64_t seq = 1; seq <= posted; seq++) { /* posted first, as the peer's launch does (pair.c) */
    mpn_slot_t* s = mpn_pair_slot(t->recv, seq, 0);
    s->side[MPN_SIDE_SEND] =
        (mpn_side_t){.count = 4, .dtype = ncclFloat32, .bytes = 16, .eager = inbox, .eager_n = seq - 1};
    __atomic_store_n(&s->state, seq << 3 | MPN_SLOT_SEND, __ATOMIC_RELEASE);
  }
  mpn_pair_mem_t* mem = t->recv->mem; /* its record, as its destroy writes it (p2p/left.c, rma/left.c) */
  mem->left_posted[MPN_SIDE_SEND][0] = posted;
  mem->left_signals[0][0] = signals;
  __atomic_store_n(&mem->left[MPN_SIDE_SEND], 1, __ATOMIC_RELEASE);
  __atomic_store_n(&t->send->mem->left[MPN_SIDE_RECV], 1, __ATOMIC_RELEASE);
  __atomic_store_n(&t->comms[0]->peer_gone[1], MPN_PEER_LEFT, __ATOMIC_RELEASE); /* as the watchdog marks it */
}

static void left_teardown(left_t* t) {
  ncclResult_t async = ncclInternalError;
  ck_assert_int_eq(ncclCommGetAsyncError(t->comms[0], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSuccess); /* refusals are the caller's errors only */
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(t->comms[i]), ncclSuccess);
}

static void expect_taken(ncclResult_t res, ncclComm_t comm, const char* what) {
  ck_assert_msg(res == ncclSuccess, "%s returned %d (%s)", what, (int)res, ncclGetLastError(comm));
}

static void expect_refused(ncclResult_t res, ncclComm_t comm, const char* text) {
  const char* last = ncclGetLastError(comm);
  ck_assert_msg(res == ncclRemoteError && strstr(last, text) != NULL,
                "returned %d, last error \"%s\"; expected %d and \"%s\"", (int)res, last, (int)ncclRemoteError, text);
}

/* Waits for the signals the peer sent pass, in one call or in a group;
 * one more is refused, naming the counts.  Before, every wait naming it was
 * refused ("ended its communicator"). */
START_TEST(wait_for_signals_sent) {
  left_t t;
  left_setup(&t, 0, MPN_EAGER_NONE, 2);
  ncclComm_t c = t.comms[0];
  ncclWaitSignalDesc_t one = {1, 1, 0, 0}, two = {2, 1, 0, 0};
  const char* third = "rank 1 ended its communicator after sending 2 signals on ctx 0; this wait needs 3";
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  expect_taken(ncclWaitSignal(1, &one, c, NULL), c, "a wait for the first of the 2 signals sent");
  expect_taken(ncclWaitSignal(1, &one, c, NULL), c, "a wait for the second");
  expect_refused(ncclWaitSignal(1, &one, c, NULL), c, third); /* the group's two came first */
  ck_assert_int_eq(ncclGroupEnd(), ncclRemoteError);          /* (nothing of it enqueued) */
  ncclWaitSignalDesc_t both[2] = {one, two};
  char second[160]; /* (one call: its second descriptor counts the first) */
  snprintf(second, sizeof(second), "ncclWaitSignal: signalDescs[1]: %s", third);
  expect_refused(ncclWaitSignal(2, both, c, NULL), c, second);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  expect_taken(ncclWaitSignal(1, &two, c, NULL), c, "a wait for both");
  expect_refused(ncclSignal(1, 0, 0, 0, c, NULL), c, "ended its communicator (ncclCommDestroy)"); /* as before */
  ck_assert_int_eq(ncclGroupEnd(), ncclRemoteError);
  left_teardown(&t);
}
END_TEST

/* A receive takes the message the peer left in this process's inbox; one
 * more is refused, naming what it posted.  Before, it was refused. */
START_TEST(receive_of_message_left) {
  left_t t;
  left_setup(&t, 1, MPN_EAGER_SMALL, 0);
  ncclComm_t c = t.comms[0];
  float buf[4];
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  expect_taken(ncclRecv(buf, 4, ncclFloat32, 1, c, NULL), c, "a receive of the message left");
  expect_refused(ncclRecv(buf, 4, ncclFloat32, 1, c, NULL), c,
                 "ncclRecv: peer 1 ended its communicator (ncclCommDestroy) and its process exited, having posted 1 "
                 "messages to this rank; this receive would take message 2");
  ck_assert_int_eq(ncclGroupEnd(), ncclRemoteError);
  expect_refused(ncclSend(buf, 4, ncclFloat32, 1, c, NULL), c, "ended its communicator (ncclCommDestroy)");
  left_teardown(&t);
}
END_TEST

/* A message left in the peer's own buffer, or in a block its process made,
 * went with it: refused, saying so. */
START_TEST(message_left_elsewhere) {
  left_t t;
  left_setup(&t, 1, MPN_EAGER_NONE, 0);
  ncclComm_t c = t.comms[0];
  float buf[4];
  expect_refused(ncclRecv(buf, 4, ncclFloat32, 1, c, NULL), c,
                 "its message 1 to this rank was left in its own buffer (not in this rank's inbox)");
  mpn_pair_slot(t.recv, 1, 0)->side[MPN_SIDE_SEND].eager = MPN_EAGER_SMALL;
  t.recv->created = 0; /* as if the peer had made the pair */
  expect_refused(ncclRecv(buf, 4, ncclFloat32, 1, c, NULL), c,
                 "its message 1 to this rank is in the inbox of a pair block its process made, freed at its end");
  t.recv->created = 1; /* (its unmap frees the block made here) */
  left_teardown(&t);
}
END_TEST

/* A peer that exited sharing nothing with this rank (MPN_PEER_EXITED)
 * left no record: its calls are refused as before. */
START_TEST(exited_peer_still_refused) {
  left_t t;
  left_setup(&t, 1, MPN_EAGER_SMALL, 2);
  ncclComm_t c = t.comms[0];
  __atomic_store_n(&c->peer_gone[1], MPN_PEER_EXITED, __ATOMIC_RELEASE);
  float buf[4];
  ncclWaitSignalDesc_t one = {1, 1, 0, 0};
  expect_refused(ncclRecv(buf, 4, ncclFloat32, 1, c, NULL), c, "ncclRecv: peer 1's process exited");
  expect_refused(ncclWaitSignal(1, &one, c, NULL), c, "ncclWaitSignal: signalDescs[0]: peer 1's process exited");
  left_teardown(&t);
}
END_TEST

int main(void) {
  Suite* s = suite_create("peer_left_calls");
  TCase* tc = tcase_create("left");
  tcase_add_test(tc, wait_for_signals_sent);
  tcase_add_test(tc, receive_of_message_left);
  tcase_add_test(tc, message_left_elsewhere);
  tcase_add_test(tc, exited_peer_still_refused);
  suite_add_tcase(s, tc);
  return unit_suite_run_forked(s);
}
