/*
 * test_p2p_report.c - what a message's side says when it cannot move data
 * (src/p2p/report.c), on communicators of one and of two ranks of this
 * process whose pairs are mapped in host memory: the CUDA calls of the
 * mapping and of the event pool are stand-ins (--wrap).
 */
#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "bootstrap/channel.h"
#include "core/comm.h"
#include "core/error.h"
#include "cuda/event.h"
#include "local_comm.h"
#include "p2p/p2p.h"
#include "p2p/plan.h"
#include "p2p/report.h"
#include "run_suite.h"

#define HOST_PAIRS_MAPPING /* (host_pairs.h) */
#include "host_pairs.h"
/* Events are numbers; a record always succeeds. */
static uintptr_t events_made;
cudaError_t __wrap_cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  (void)flags;
  *ev = (cudaEvent_t)++events_made;
  return cudaSuccess;
}
cudaError_t __wrap_cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  (void)ev, (void)s;
  return cudaSuccess;
}

/* A message of a communicator's rank with peer, as the launch plans it:
 * its pairs mapped, its number seq. */
typedef struct {
  mpn_op_t op;
  plan_t p;
} message_t;

static void message_of(ncclComm_t comm, int peer, mpn_op_kind_t kind, uint64_t seq, message_t* m) {
  mpn_pair_t *send = NULL, *recv = NULL;
  ck_assert_int_eq(mpn_p2p_pairs(comm, peer, &send, &recv), ncclSuccess);
  memset(m, 0, sizeof(*m));
  m->op = (mpn_op_t){.kind = kind, .comm = comm, .count = 4, .dtype = ncclFloat32, .bytes = 16, .peer = peer};
  m->p.op = &m->op;
  m->p.pair = kind == MPN_OP_SEND ? send : recv;
  m->p.seq = seq;
  m->p.prepared = 1;
}

/* The same from the rank of a new communicator of one to itself. */
static ncclComm_t self_message(mpn_op_kind_t kind, uint64_t seq, message_t* m) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  message_of(comm, 0, kind, seq, m);
  return comm;
}

/* After ncclCommGetAsyncError, which takes in what the pairs hold for
 * comm: its asynchronous error is code and its last error holds text. */
static void expect_after_poll(ncclComm_t comm, ncclResult_t code, const char* text) {
  ncclResult_t async = ncclSuccess;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  const char* last = ncclGetLastError(comm);
  ck_assert_msg(async == code && strstr(last, text) != NULL,
                "asynchronous error %d, last error \"%s\"; expected %d and \"%s\"", (int)async, last, (int)code, text);
}

/* A post refused between ranks of one process under MPS (p2p.c,
 * plan_post; docs/P2P.md, known problem 6): the event its description
 * recorded goes back to the device's pool, as nobody waits for it. */
START_TEST(refused_post_gives_its_event_back) {
  message_t m;
  ncclComm_t comm = self_message(MPN_OP_SEND, 513, &m);
  m.p.local = 1;
  mpn_side_t mine = {.count = 4, .dtype = ncclFloat32, .event_dev = 0};
  cudaEvent_t ev = NULL;
  ck_assert(mpn_event_mark(0, NULL, &ev));
  mine.event = (uint64_t)(uintptr_t)ev;
  ck_assert_int_eq(mpn_event_out(0), 1);
  ncclResult_t refused = mpn_error_set(NULL, ncclInvalidUsage, "more than 512 messages outstanding");
  mpn_plan_report_refused_post(&m.p, &mine, refused);
  ck_assert_msg(mpn_event_out(0) == 0, "%d event(s) of device 0 held after a refused post", mpn_event_out(0));
  expect_after_poll(comm, ncclInvalidUsage, "is out of step: abort the communicator");
}
END_TEST

/* A count mismatch between a rank's send to itself and its receive from
 * itself is its communicator's error once: an error that came after it
 * stays the last error when ncclCommGetAsyncError asks the pairs. */
START_TEST(self_mismatch_reported_once) {
  message_t m;
  ncclComm_t comm = self_message(MPN_OP_RECV, 1, &m);
  mpn_side_t mine = {.count = 4, .dtype = ncclFloat32}, other = {.count = 8, .dtype = ncclFloat32};
  mpn_plan_report_mismatch(&m.p, &mine, &other);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "ncclSend of 8 x ncclFloat32, ncclRecv of 4 x ncclFloat32"));
  mpn_error_set(comm, ncclInvalidArgument, "a later error");
  expect_after_poll(comm, ncclInvalidUsage, "a later error"); /* (not the mismatch reported again over it) */
}
END_TEST

/* A rank's own buffer refused in a message to itself: its text and code
 * stay (the pair would have told it "ncclRemoteError: rank 0 could not use
 * the buffers", as if another rank had failed). */
START_TEST(self_refused_buffer_stays_its_own) {
  message_t m;
  ncclComm_t comm = self_message(MPN_OP_SEND, 1, &m);
  ncclResult_t bad = mpn_error_set(comm, ncclInvalidArgument, "ncclSend: sendbuff runs past the end");
  mpn_plan_report_failed_move(&m.p, bad);
  expect_after_poll(comm, ncclInvalidArgument, "ncclSend: sendbuff runs past the end");
}
END_TEST

/* The same where its first-posted side refused its buffer: the second
 * side, which finds the refusal in the pair (exported: minus its code,
 * pair.h), reports that code, not ncclRemoteError, as no other rank is
 * involved, and the refusal's text stays. */
START_TEST(self_first_side_refusal_keeps_its_code) {
  message_t m;
  ncclComm_t comm = self_message(MPN_OP_RECV, 1, &m);
  ncclResult_t bad = mpn_error_set(comm, ncclInvalidArgument, "ncclSend: sendbuff runs past the end");
  mpn_side_t refused = {.count = 4, .dtype = ncclFloat32, .exported = -(int32_t)bad, .proc = mpn_chan_proc_id()};
  ck_assert(mpn_plan_buffer_refused(&m.p, ncclSuccess, &refused));
  expect_after_poll(comm, ncclInvalidArgument, "ncclSend: sendbuff runs past the end");
}
END_TEST

/* Two ranks of this process, made together, whose pairs map host memory,
 * and message 1 from rank 0 to rank 1 as each side plans it. */
static void two_ranks_message(ncclComm_t comms[2], message_t* sent, message_t* received) {
  use_local_bootstrap();
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommInitRank(&comms[i], 2, id, i), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  message_of(comms[0], 1, MPN_OP_SEND, 1, sent);
  message_of(comms[1], 0, MPN_OP_RECV, 1, received);
}

/* A mismatch the receiving rank finds is told to the sending rank through
 * their pair, and is the receiver's error once: it maps that pair too. */
START_TEST(peer_mismatch_told_once) {
  ncclComm_t comms[2];
  message_t sent, received;
  two_ranks_message(comms, &sent, &received);
  mpn_side_t mine = {.count = 4, .dtype = ncclFloat32}, other = {.count = 8, .dtype = ncclFloat32};
  mpn_plan_report_mismatch(&received.p, &mine, &other);
  mpn_error_set(comms[1], ncclInvalidArgument, "a later error");
  expect_after_poll(comms[1], ncclInvalidUsage, "a later error");
  expect_after_poll(comms[0], ncclInvalidUsage, "ncclSend of 8 x ncclFloat32, ncclRecv of 4 x ncclFloat32");
}
END_TEST

/* A peer found gone is the communicator's asynchronous error and last
 * error, and stays so: the failures that follow from it (a launch's
 * message it reports, a report of the peer's side through their pair) do
 * not stand in for the cause.  The other rank, which failed first on the
 * mismatch, keeps that. */
START_TEST(first_failure_survives_later_ones) {
  ncclComm_t comms[2];
  message_t sent, received;
  two_ranks_message(comms, &sent, &received);
  mpn_comm_set_broken(comms[0], ncclRemoteError, "rank 1 (process 42 on node7) is gone (made up by the test)");
  mpn_side_t mine = {.count = 4, .dtype = ncclFloat32}, other = {.count = 8, .dtype = ncclFloat32};
  mpn_plan_report_mismatch(&received.p, &mine, &other); /* (rank 0 learns it through the pair) */
  mpn_plan_report_copy_lost(&sent.p, ncclUnhandledCudaError);
  mpn_error_clear(); /* (as on a thread of its own: this one's text, newer, is rank 1's report) */
  expect_after_poll(comms[0], ncclRemoteError, "is gone (made up by the test)");
  expect_after_poll(comms[1], ncclInvalidUsage, "ncclSend of 8 x ncclFloat32, ncclRecv of 4 x ncclFloat32");
}
END_TEST

int main(void) {
  Suite* s = suite_create("p2p_report");
  TCase* tc = tcase_create("self");
  tcase_add_test(tc, refused_post_gives_its_event_back);
  tcase_add_test(tc, self_mismatch_reported_once);
  tcase_add_test(tc, self_refused_buffer_stays_its_own);
  tcase_add_test(tc, self_first_side_refusal_keeps_its_code);
  tcase_add_test(tc, peer_mismatch_told_once);
  tcase_add_test(tc, first_failure_survives_later_ones);
  suite_add_tcase(s, tc);
  return unit_suite_run_forked(s);
}
