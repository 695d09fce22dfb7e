/*
 * test_alloc_fail.c - what the library does when an allocation fails: the
 * call returns ncclSystemError with a message and leaks nothing it took.
 * The test is linked with --wrap for malloc, calloc and free (Makefile.am),
 * so the library's calls to them come here first; a chosen one fails.  No
 * GPU used, also where there is one.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/bootstrap.h"
#include "core/comm.h"
#include "core/enqueue.h"
#include "core/param.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "rma/rma.h"
#include "run_suite.h"

void* __real_malloc(size_t size);
void* __real_calloc(size_t n, size_t size);
void __real_free(void* p);

/* The countdown-th malloc from now on fails (0: none); what the mallocs
 * since arming returned, and whether each was freed since. */
static int countdown;
static void* given[8];
static int ngiven, freed[8];

void* __wrap_malloc(size_t size) {
  if (countdown > 0 && --countdown == 0) return NULL;
  void* p = __real_malloc(size);
  if (countdown > 0 && ngiven < 8) given[ngiven++] = p;
  return p;
}

/* While set, a calloc of one object of this size fails. */
static size_t fail_calloc_of;

void* __wrap_calloc(size_t n, size_t size) {
  if (fail_calloc_of && n == 1 && size == fail_calloc_of) return NULL;
  return __real_calloc(n, size);
}

void __wrap_free(void* p) {
  for (int i = 0; p && i < ngiven; i++)
    if (given[i] == p) freed[i] = 1;
  __real_free(p);
}

static void arm(int nth) {
  ngiven = 0;
  memset(freed, 0, sizeof(freed));
  countdown = nth;
}

/* ncclWaitSignal copies its descriptors, then queues the operation: when
 * the queueing fails, the copy is freed too. */
START_TEST(wait_signal_queue_fails) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  ncclWaitSignalDesc_t d[3] = {{1, 0, 0, 0}, {1, 0, 0, 0}, {2, 0, 0, 0}};
  arm(2); /* the first malloc is the copy of the descriptors, the second the queued op */
  ck_assert_int_eq(ncclWaitSignal(3, d, comm, NULL), ncclSystemError);
  countdown = 0;
  ck_assert_int_eq(ngiven, 1);
  ck_assert_msg(freed[0], "ncclWaitSignal leaked its copy of the descriptors (%p)", given[0]);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "out of memory"));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* The one-sided launch makes a communicator's one-sided state on its first
 * operation (a signal needs no window): when that fails, it returns
 * ncclSystemError instead of reading operations it had not listed yet.
 * Called directly (without a GPU the group's checks refuse before it). */
START_TEST(rma_state_fails_at_launch) {
  use_local_bootstrap();
  ncclComm_t comm = comm_of_one();
  ck_assert_ptr_null(comm->rma);
  mpn_op_t second = {.kind = MPN_OP_SIGNAL, .comm = comm, .peer = 0};
  mpn_op_t first = {.kind = MPN_OP_SIGNAL, .comm = comm, .peer = 0, .next = &second};
  fail_calloc_of = sizeof(mpn_rma_t);
  ncclResult_t res = mpn_rma_launch(&first);
  fail_calloc_of = 0;
  ck_assert_int_eq(res, ncclSystemError);
  ck_assert_ptr_null(comm->rma);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* A rendezvous whose table cannot be made answers nobody (the caller's
 * wait runs out), and its unique id then serves a new round: the round
 * ends, answered or not.  (Before, its full list stayed, and the next
 * caller's hello was written past its end.) */
START_TEST(rendezvous_table_fails) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "1");
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = NULL;
  fail_calloc_of = mpn_bootstrap_table_bytes(1);
  ncclResult_t first = ncclCommInitRank(&comm, 1, id, 0);
  fail_calloc_of = 0;
  ck_assert_int_eq(first, ncclTimeout);
  ck_assert_ptr_null(comm);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_ptr_nonnull(comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  use_local_bootstrap(); /* (the timeout back to its default) */
}
END_TEST

int main(void) {
  /* No GPU, also on a machine that has one: the communicators are then
   * host-only, and no CUDA library allocates through the wrapped calls. */
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  Suite* s = suite_create("alloc_fail");
  TCase* tc = tcase_create("core");
  tcase_add_test(tc, wait_signal_queue_fails);
  tcase_add_test(tc, rma_state_fails_at_launch);
  tcase_add_test(tc, rendezvous_table_fails);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
