/*
 * local_comm.h - what the unit tests that make communicators in this
 * process share (tests/unit/test_comm_local*.c, test_refusals.c,
 * test_alloc_fail.c): the in-process bootstrap and a communicator of one
 * rank.
 */
#ifndef MPN_TESTS_UNIT_LOCAL_COMM_H_
#define MPN_TESTS_UNIT_LOCAL_COMM_H_

#include <check.h>
#include <stdlib.h>

#include "core/param.h"
#include "nccl.h"

/* Parameters are read once per process: re-read them (tests may run unforked). */
static inline void set_param(const char* name, const char* value) {
  setenv(name, value, 1);
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
}

static inline void use_local_bootstrap(void) {
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  set_param("MPINCCL_BOOTSTRAP", "local");
}

/* One communicator of one rank. */
static inline ncclComm_t comm_of_one(void) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_ptr_nonnull(comm);
  return comm;
}

#endif /* MPN_TESTS_UNIT_LOCAL_COMM_H_ */
