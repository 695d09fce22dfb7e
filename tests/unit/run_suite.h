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
 * Runs every test of s in fork mode how, prints Check's normal summary,
 * frees the runner (and s with it) and returns EXIT_SUCCESS when no test
 * failed, else EXIT_FAILURE: main returns it.
 */
static inline int unit_suite_run_as(Suite* s, enum fork_status how) {
  SRunner* sr = srunner_create(s);
  srunner_set_fork_status(sr, how);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/** As unit_suite_run_as, in the mode CK_FORK asks for (forked by default). */
static inline int unit_suite_run(Suite* s) { return unit_suite_run_as(s, CK_FORK_GETENV); }

/**
 * For suites whose tests share state of the process that one test cannot
 * put back for the next (a library thread and the tables it works on):
 * every test forked, whatever CK_FORK says.  valgrind follows the forks.
 */
static inline int unit_suite_run_forked(Suite* s) { return unit_suite_run_as(s, CK_FORK); }

#endif /* MPN_TESTS_UNIT_RUN_SUITE_H_ */
