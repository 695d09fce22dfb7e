/*
 * test_drain_marks.c - a thread's list of the marks its group launches
 * make (src/core/drain.c, mpn_drain_begin) goes with the thread: a program
 * whose threads come and go (a pool that replaces its workers) must not
 * leave one list on the heap per thread that ever ended a group.  realloc
 * and free are wrapped (Makefile.am), so the test sees the list's memory.
 * No GPU used: mpn_drain_begin only lists.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/drain.h"
#include "run_suite.h"

void* __real_realloc(void* p, size_t size);
void __real_free(void* p);

static __thread int watching; /* set on the test's launching thread only */
static void* listed;          /* what that thread's realloc returned */
static int listed_freed;

void* __wrap_realloc(void* p, size_t size) {
  void* q = __real_realloc(p, size);
  if (watching && q) listed = q;
  return q;
}

void __wrap_free(void* p) {
  if (p && p == listed) listed_freed = 1;
  __real_free(p);
}

/* A launching thread: marks one stream of a communicator (never read: the
 * begin only lists it), as work_begin does before a group's launch. */
static void* launcher(void* comm) {
  watching = 1;
  mpn_drain_begin(comm, (cudaStream_t)0x1, 1, 0);
  watching = 0;
  return NULL;
}

START_TEST(list_freed_with_thread) {
  static char comm_stand_in[64];
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, launcher, comm_stand_in), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
  ck_assert_ptr_nonnull(listed);
  ck_assert_msg(listed_freed, "the marks list of a thread that ended (%p) stayed on the heap", listed);
}
END_TEST

int main(void) {
  Suite* s = suite_create("drain_marks");
  TCase* tc = tcase_create("threads");
  tcase_add_test(tc, list_freed_with_thread);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
