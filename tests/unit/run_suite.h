/*
 * run_suite.h - how every Check program of tests/unit ends: its suite run
 * once, its failures turned into the exit status the test harness reads.
 * C and C++ (test_copy_range.cc) include it alike.
 */
#ifndef MPN_TESTS_UNIT_RUN_SUITE_H_
#define MPN_TESTS_UNIT_RUN_SUITE_H_

#include <check.h>
#include <stdlib.h>

/**
 * Runs every test of s (Check's fork mode: forked unless CK_FORK=no), prints
 * Check's normal summary, frees the runner (and s with it) and returns
 * EXIT_SUCCESS when no test failed, else EXIT_FAILURE: main returns it.
 */
static inline int unit_suite_run(Suite* s) {
  SRunner* sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif /* MPN_TESTS_UNIT_RUN_SUITE_H_ */
