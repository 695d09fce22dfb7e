/*
 * test_ucx_region.c - a UCX region's registration (src/ucx/rma.c) that
 * fails before anything was mapped on this rank: on a rank whose process
 * cannot start UCX (a rank with no UCX peer of its own starts it only at
 * its first window), the failure must come at once, with UCX's reason.
 * Before, the cleanup asked the proxy thread, which never started, to
 * unmap nothing, and waited MPINCCL_BOOTSTRAP_TIMEOUT for its answer,
 * leaving "the UCX proxy thread does not answer" as the thread's text.
 * The communicator's UCX state, the proxy's start and the bootstrap's
 * allgather are stand-ins (--wrap).
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#include "bootstrap/bootstrap.h"
#include "core/clock.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/param.h"
#include "ucx/net_comm.h"
#include "ucx/proxy.h"
#include "ucx/rma.h"
#include "run_suite.h"

int __wrap_mpn_ucx_comm_ready(const struct ncclComm* comm) {
  (void)comm;
  return 1;
}
ncclResult_t __wrap_mpn_ucx_proxy_start(const char* near_pci, const void** address, size_t* len) {
  (void)near_pci, (void)address, (void)len;
  return mpn_error_set(NULL, ncclSystemError, "UCX could not start: no such device (the test's)");
}
ncclResult_t __wrap_mpn_bootstrap_allgather(mpn_bootstrap_t* b, void* buf, size_t size) {
  (void)b, (void)buf, (void)size; /* (the peers' answers do not matter: this rank failed) */
  return ncclSuccess;
}

START_TEST(unstarted_proxy_fails_at_once) {
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "3", 1);
  ck_assert_int_eq(mpn_params_load(), ncclSuccess);
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  ck_assert_ptr_nonnull(comm);
  comm->nranks = 2;
  static char base[4096];
  mpn_ucx_region_t* region = (mpn_ucx_region_t*)&region; /* (must be cleared) */
  uint64_t t0 = mpn_clock_now_ns();
  ck_assert_int_eq(mpn_ucx_region_register(comm, base, sizeof(base), &region), ncclSystemError);
  double took = (double)(mpn_clock_now_ns() - t0) * 1e-9;
  ck_assert_ptr_null(region);
  ck_assert_msg(took < 1.0, "the failed registration took %.1f s", took);
  ck_assert_msg(strstr(ncclGetLastError(NULL), "UCX could not start") != NULL, "last error: %s",
                ncclGetLastError(NULL));
  free(comm);
}
END_TEST

int main(void) {
  Suite* s = suite_create("ucx_region");
  TCase* tc = tcase_create("register");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, unstarted_proxy_fails_at_once);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
