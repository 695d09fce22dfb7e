/*
 * test_drain_marks.c - a thread's list of the marks its group launches
 * make (src/core/drain.c, mpn_drain_begin) goes with the thread: a program
 * whose threads come and go (a pool that replaces its workers) must not
 * leave one list on the heap per thread that ever ended a group.  realloc
 * and free are wrapped (Makefile.am), so the test sees the list's memory
 * and can refuse it (a list that cannot grow fails the begin).
 * No GPU used: mpn_drain_begin only lists.
 */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/drain.h"
#include "run_suite.h"

void* __real_realloc(void* p, size_t size);
void __real_free(void* p);

static __thread int watching; /* set on the test's launching thread only */
static void* listed;          /* what that thread's realloc returned */
static int listed_freed;
static __thread int realloc_fails; /* set: this thread's reallocs fail */

void* __wrap_realloc(void* p, size_t size) {
  if (realloc_fails) return NULL;
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

/* A thread whose list cannot grow: the begin fails with ncclSystemError
 * and a text that says so (the group is then not launched, core/group.c),
 * instead of leaving the stream out of the finalize's waits unsaid; once
 * memory comes, the stream is listed. */
static void* failing_launcher(void* comm) {
  realloc_fails = 1;
  ncclResult_t* res = calloc(2, sizeof(*res));
  if (res == NULL) return NULL;
  res[0] = mpn_drain_begin(comm, (cudaStream_t)0x1, 1, 0);
  realloc_fails = 0;
  res[1] = mpn_drain_begin(comm, (cudaStream_t)0x1, 1, 0);
  return res;
}

START_TEST(list_that_cannot_grow_fails) {
  struct ncclComm comm;
  memset(&comm, 0, sizeof(comm));
  pthread_mutex_init(&comm.error_lock, NULL);
  comm.rank = 3;
  pthread_t t;
  ncclResult_t* res = NULL;
  ck_assert_int_eq(pthread_create(&t, NULL, failing_launcher, &comm), 0);
  ck_assert_int_eq(pthread_join(t, (void**)&res), 0);
  ck_assert_ptr_nonnull(res);
  ck_assert_msg(res[0] == ncclSystemError && strstr(comm.error_text, "out of memory listing rank 3's work on stream"),
                "a failed realloc of the marks list: result %d, text \"%s\"", (int)res[0], comm.error_text);
  ck_assert_int_eq(res[1], ncclSuccess);
  free(res);
}
END_TEST

int main(void) {
  Suite* s = suite_create("drain_marks");
  TCase* tc = tcase_create("threads");
  tcase_add_test(tc, list_freed_with_thread);
  tcase_add_test(tc, list_that_cannot_grow_fails);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
