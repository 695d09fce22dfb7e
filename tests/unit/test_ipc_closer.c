/*
 * test_ipc_closer.c - the thread that closes IPC imports (src/cuda/ipc_closer.c)
 * with the caches that hand it their closes, against a model of the driver
 * (ipc_model.h): imports that wait for a close, the launches' gate, the
 * process's quiet, a device reset and the stop at the process's exit.
 */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda/ipc.h"
#include "cuda/ipc_closer.h"
#include "cuda/ipc_held.h"
#include "ipc_model.h"
#include "nccl.h"
#include "run_suite.h"

/* The driver's close waits for all of the process's GPU work, which may
 * wait for a peer that waits for this host (docs/P2P.md, known problem 17):
 * imports go on while every close waits; the closes follow once the work
 * ends.  (Before, the first stale close blocked the import for good.) */
START_TEST(import_never_waits_for_closes) {
  done[0] = 1;
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE);
  for (uint64_t id = 1; id <= 50; id++) {
    mpn_ipc_desc_t d = owner_buffer(id, size - (id % 3) * 4096, id);
    import_once(&d, event(0));
  }
  mpn_ipc_forget(owner, 50, 0, NULL);
  ck_assert_int_eq(imports(), 0);
  ck_assert_int_eq(closes, 0);
  ck_assert_int_eq(mpn_ipc_closer_pending(), 50);
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  ck_assert_int_eq(closed(), 50);
  ck_assert_int_eq(open_count(), 0);
}
END_TEST

/* Over a freed one still imported and beyond it: the old import is
 * closed on the closing thread, waited for, and the open retried. */
START_TEST(import_over_stale_waits_for_its_close) {
  done[0] = 1;
  mpn_ipc_desc_t q = owner_range(1, base, 4096, 1), s1 = owner_range(2, base, 8192, 2);
  import_once(&q, event(0));
  void* ps = NULL;
  mpn_ipc_ref_t ref;
  ck_assert_int_eq(mpn_ipc_import(owner, &s1, &ps, &ref), ncclSuccess);
  mpn_ipc_mark_used(&ref, event(0), 0);
  expect_counts(1, 1, 1);
}
END_TEST

/* The same while the close cannot end (the process's GPU work waits for a
 * peer): after MPINCCL_IPC_CLOSE_WAIT the import fails, saying why, and
 * the close ends later. */
START_TEST(import_over_stale_gives_up) {
  setenv("MPINCCL_IPC_CLOSE_WAIT", "1", 1);
  done[0] = 1;
  mpn_ipc_desc_t q = owner_range(1, base, 4096, 1), s1 = owner_range(2, base, 8192, 2);
  import_once(&q, event(0));
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE);
  void* ps = NULL;
  mpn_ipc_ref_t ref;
  ck_assert_int_eq(mpn_ipc_import(owner, &s1, &ps, &ref), ncclUnhandledCudaError);
  ck_assert_ptr_null(ps);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "MPINCCL_IPC_CLOSE_WAIT (1 s)"));
  ck_assert_int_eq(imports(), 0);
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  ck_assert_int_eq(closed(), 1);
  ck_assert_int_eq(mpn_ipc_import(owner, &s1, &ps, &ref), ncclSuccess);
  mpn_ipc_mark_used(&ref, event(0), 0);
}
END_TEST

/* An import of owner's on a thread of its own, for imports that wait for
 * closes while the test goes on. */
typedef struct {
  const mpn_ipc_desc_t* desc;
  pthread_t thread;
  void* ptr;
  mpn_ipc_ref_t ref;
  ncclResult_t res;
  int done;
} importer_t;

static void* import_in_thread(void* arg) {
  importer_t* im = arg;
  im->res = mpn_ipc_import(owner, im->desc, &im->ptr, &im->ref);
  __atomic_store_n(&im->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* Starts im's import of desc and returns once queued closes are pending
 * (those the import waits for). */
static void import_start(importer_t* im, const mpn_ipc_desc_t* desc, int queued) {
  im->desc = desc;
  ck_assert_int_eq(pthread_create(&im->thread, NULL, import_in_thread, im), 0);
  for (int tries = 0; mpn_ipc_closer_pending() < queued && tries < 1000; tries++) usleep(1000);
  ck_assert_int_eq(mpn_ipc_closer_pending(), queued);
}

/* Joins im's import, which must have worked, and reports its use. */
static void* import_finish(importer_t* im) {
  ck_assert_int_eq(pthread_join(im->thread, NULL), 0);
  ck_assert_int_eq(im->res, ncclSuccess);
  ck_assert_ptr_nonnull(im->ptr);
  mpn_ipc_mark_used(&im->ref, event(0), 0);
  return im->ptr;
}

static uint64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* An import that waits for a close (as in import_over_stale_waits_for_its_close)
 * waits without the cache's lock: another thread's report of use, count and
 * import of another owner's buffer return at once, and the import ends once
 * the close does.  (Before, they waited with it: here for all of
 * MPINCCL_IPC_CLOSE_WAIT, the close being held until they return.) */
START_TEST(others_go_on_while_an_import_waits) {
  setenv("MPINCCL_IPC_CLOSE_WAIT", "3", 1);
  done[0] = 1;
  mpn_ipc_desc_t q = owner_range(1, base, 4096, 1), s1 = owner_range(2, base, 8192, 2),
                 r = owner_range(3, base + 65536, 4096, 3), other = owner_buffer(9, size, 9);
  void *pr = NULL, *po = NULL;
  mpn_ipc_ref_t ref_r, ref_o;
  import_once(&q, event(0));
  ck_assert_int_eq(mpn_ipc_import(owner, &r, &pr, &ref_r), ncclSuccess); /* handed out */
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE);
  importer_t a = {0};
  import_start(&a, &s1, 1); /* q's close, held */
  uint64_t start = now_ms();
  mpn_ipc_mark_used(&ref_r, event(0), 0);
  ck_assert_int_eq(imports(), 1); /* r: q went, s1 is not in yet */
  ck_assert_int_eq(mpn_ipc_import(owner + 1, &other, &po, &ref_o), ncclSuccess);
  mpn_ipc_mark_used(&ref_o, event(0), 0);
  uint64_t took = now_ms() - start;
  ck_assert_msg(took < 500, "the calls beside the import's wait took %llu ms", (unsigned long long)took);
  ck_assert_int_eq(__atomic_load_n(&a.done, __ATOMIC_ACQUIRE), 0); /* it still waits */
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  ck_assert_ptr_eq(import_finish(&a), mapping_ptr(3)); /* (the model's mappings: q, r, other, s1) */
  expect_counts(3, 1, 3);
}
END_TEST

/* Three imports wait for closes at once: two of the same buffer s1, which
 * get one mapping and one entry (the second finds the first's after its
 * wait, rather than opening it again), and one of s2, another buffer of
 * the same owner, which waits for a close of its own. */
START_TEST(imports_wait_at_once) {
  setenv("MPINCCL_IPC_CLOSE_WAIT", "10", 1);
  done[0] = 1;
  mpn_ipc_desc_t q1 = owner_range(1, base, 4096, 1), q2 = owner_range(2, base + 65536, 4096, 2),
                 s1 = owner_range(3, base, 8192, 3), s2 = owner_range(4, base + 65536, 8192, 4);
  import_once(&q1, event(0));
  import_once(&q2, event(0));
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE);
  importer_t im[3] = {{0}};
  import_start(&im[0], &s1, 1); /* q1's close */
  import_start(&im[1], &s1, 1); /* (the same close) */
  usleep(100000);
  import_start(&im[2], &s2, 2); /* q2's close */
  usleep(200000);               /* the second and third in their waits too */
  for (int k = 0; k < 3; k++) ck_assert_int_eq(__atomic_load_n(&im[k].done, __ATOMIC_ACQUIRE), 0);
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  void* p1 = import_finish(&im[0]);
  ck_assert_ptr_eq(import_finish(&im[1]), p1);
  ck_assert_ptr_ne(import_finish(&im[2]), p1);
  expect_counts(2, 2, 2);
}
END_TEST

/* What the owner reads from this process's list of held imports
 * (cuda/ipc_held.h) before it shares a new allocation s1 over a freed q:
 * q is in the way until its close has returned, which the owner asks for
 * (mpn_ipc_drop_in_way) and which never waits here.  An import of exactly
 * s1's range is not in the way and stays; one handed out for copies not
 * yet issued stays until they are. */
START_TEST(held_imports_seen_by_owner) {
  done[0] = 1;
  mpn_ipc_held_proc_t me = mpn_ipc_held_self();
  mpn_ipc_desc_t q = owner_range(1, base, 4096, 1), s1 = owner_range(2, base, 8192, 2),
                 r = owner_range(3, base + 65536, 8192, 3), t = owner_range(4, base + 131072, 4096, 4);
  import_once(&q, event(0));
  import_once(&r, event(0));
  ck_assert_int_eq(mpn_ipc_held_count(), 2);
  ck_assert_int_eq(mpn_ipc_held_in_way(&me, owner, s1.base, s1.size), 1);
  ck_assert_int_eq(mpn_ipc_held_in_way(&me, owner, r.base, r.size), 0);       /* r itself */
  ck_assert_int_eq(mpn_ipc_held_in_way(&me, owner + 1, s1.base, s1.size), 0); /* another owner */
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE);
  mpn_ipc_drop_in_way(owner, s1.base, s1.size);
  mpn_ipc_drop_in_way(owner, r.base, r.size); /* exactly r: it stays */
  ck_assert_int_eq(imports(), 1);
  ck_assert_int_eq(mpn_ipc_closer_pending(), 1);
  ck_assert_int_eq(mpn_ipc_held_in_way(&me, owner, s1.base, s1.size), 1); /* until the close returns */
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  ck_assert_int_eq(closed(), 1);
  ck_assert_int_eq(mpn_ipc_held_in_way(&me, owner, s1.base, s1.size), 0);
  ck_assert_int_eq(mpn_ipc_held_count(), 1);
  /* Handed out, copies not yet issued: not closed from under them. */
  void* pt = NULL;
  mpn_ipc_ref_t ref;
  ck_assert_int_eq(mpn_ipc_import(owner, &t, &pt, &ref), ncclSuccess);
  mpn_ipc_drop_in_way(owner, t.base, 8192);
  ck_assert_int_eq(mpn_ipc_closer_pending(), 0);
  mpn_ipc_mark_used(&ref, event(0), 0);
  mpn_ipc_drop_in_way(owner, t.base, 8192);
  ck_assert_int_eq(closed(), 2);
  ck_assert_int_eq(mpn_ipc_held_count(), 1);
  mpn_ipc_forget(owner, 3, 0, NULL);
  ck_assert_int_eq(open_count(), 0);
  ck_assert_int_eq(mpn_ipc_held_count(), 0);
}
END_TEST

/* Closes start only between launches and once the process is quiet
 * (ipc_closer.h), unless a thread waits for them. */
static int quiet_now;
static int test_quiet(void) { return __atomic_load_n(&quiet_now, __ATOMIC_ACQUIRE); }

START_TEST(closes_wait_for_quiet) {
  done[0] = 1;
  mpn_ipc_closer_set_quiet(test_quiet);
  mpn_ipc_desc_t q = owner_range(1, base, 4096, 1), r = owner_range(2, base + 65536, 4096, 2);
  import_once(&q, event(0));
  import_once(&r, event(0));
  mpn_ipc_forget(owner, 1, 0, NULL);
  usleep(100000);
  ck_assert_int_eq(closes, 0); /* not quiet */
  ck_assert_int_eq(mpn_ipc_closer_launch_begin(), 1);
  __atomic_store_n(&quiet_now, 1, __ATOMIC_RELEASE);
  usleep(100000);
  ck_assert_int_eq(closes, 0); /* quiet, but a launch runs */
  mpn_ipc_closer_launch_end(1);
  ck_assert_int_eq(closed(), 1);
  /* A thread waiting for a close does not wait for quiet. */
  __atomic_store_n(&quiet_now, 0, __ATOMIC_RELEASE);
  mpn_ipc_forget(owner, 2, 0, NULL);
  ck_assert_int_eq(mpn_ipc_closer_wait(owner, 0, r.base, r.size, NULL, 5000), 1);
  ck_assert_int_eq(closes, 2);
  ck_assert_int_eq(open_count(), 0);
}
END_TEST

/* A launch that finds a close running for long (it waits for work of the
 * application's, which may wait for this host to pass the launch) goes on
 * beside it after a short wait, and no close starts before that launch
 * ends (ipc_closer.h). */
/* Two imports q and r made, the process quiet, and the "device" busy: a
 * close waits until the test lets it go (closes_held). */
static void quiet_two_imports_held(mpn_ipc_desc_t* q, mpn_ipc_desc_t* r) {
  done[0] = 1;
  mpn_ipc_closer_set_quiet(test_quiet);
  __atomic_store_n(&quiet_now, 1, __ATOMIC_RELEASE);
  *q = owner_range(1, base, 4096, 1), *r = owner_range(2, base + 65536, 4096, 2);
  import_once(q, event(0));
  import_once(r, event(0));
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE);
}

START_TEST(launch_goes_by_a_long_close) {
  mpn_ipc_desc_t q, r;
  quiet_two_imports_held(&q, &r);
  mpn_ipc_forget(owner, 1, 0, NULL);
  int gated = 1;
  for (int tries = 0; gated && tries < 500; tries++) { /* until the close holds the gate */
    gated = mpn_ipc_closer_launch_begin();
    if (gated) {
      mpn_ipc_closer_launch_end(1);
      usleep(10000);
    }
  }
  ck_assert_int_eq(gated, 0);                         /* it went on beside the close */
  ck_assert_int_eq(mpn_ipc_closer_launch_begin(), 0); /* a later one at once: the close is older than the wait */
  mpn_ipc_closer_launch_end(0);
  mpn_ipc_forget(owner, 2, 0, NULL);
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  for (int tries = 0; __atomic_load_n(&closes, __ATOMIC_ACQUIRE) < 1 && tries < 500; tries++) usleep(10000);
  usleep(100000);
  ck_assert_int_eq(__atomic_load_n(&closes, __ATOMIC_ACQUIRE), 1); /* the second waits for the launch */
  mpn_ipc_closer_launch_end(0);
  ck_assert_int_eq(closed(), 2);
  ck_assert_int_eq(open_count(), 0);
}
END_TEST

/* The closing thread's quiet check may take long (it reads the device): a
 * launch that meanwhile waited past GATE_WAIT_NS and went on without the
 * gate keeps the close from starting until it ends, though the check then
 * says quiet (found in review). */
static int quiet_asked;
static int slow_quiet(void) {
  __atomic_store_n(&quiet_asked, 1, __ATOMIC_RELEASE);
  usleep(200000);
  return 1;
}

/* One import forgotten, its close queued: returns once the closing thread
 * is inside its (slow) check of whether the process is quiet. */
static void close_in_slow_check(void) {
  done[0] = 1;
  mpn_ipc_closer_set_quiet(slow_quiet);
  mpn_ipc_desc_t q = owner_range(1, base, 4096, 1);
  import_once(&q, event(0));
  mpn_ipc_forget(owner, 1, 0, NULL);
  for (int tries = 0; !__atomic_load_n(&quiet_asked, __ATOMIC_ACQUIRE) && tries < 500; tries++) usleep(1000);
  ck_assert_int_eq(__atomic_load_n(&quiet_asked, __ATOMIC_ACQUIRE), 1);
}

START_TEST(no_close_beside_an_ungated_launch) {
  close_in_slow_check();
  ck_assert_int_eq(mpn_ipc_closer_launch_begin(), 0); /* the check holds the gate past the wait */
  usleep(600000);                                     /* more checks, each saying quiet */
  ck_assert_int_eq(__atomic_load_n(&closes, __ATOMIC_ACQUIRE), 0);
  mpn_ipc_closer_launch_end(0);
  ck_assert_int_eq(closed(), 1);
}
END_TEST

/* The threads of this process (the closing thread among them until it
 * has ended). */
static int threads_now(void) {
  DIR* dir = opendir("/proc/self/task");
  ck_assert_ptr_nonnull(dir);
  int n = 0;
  for (struct dirent* e = readdir(dir); e; e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

/* A stop (mpn_ipc_closer_stop, at the process's exit) that comes while the
 * closing thread asks whether the process is quiet finds no close running
 * and says so: that close must then not start, quiet or not (found in
 * review).  The thread has ended and was joined when the stop returns,
 * though a close is still queued (before, it was left unjoined: valgrind
 * saw its stack "possibly lost"). */
START_TEST(stop_during_quiet_check) {
  int before = threads_now();
  close_in_slow_check();
  ck_assert_int_eq(mpn_ipc_closer_stop(1000), 1); /* no close runs yet */
  ck_assert_msg(threads_now() == before, "%d threads after the stop, %d before the closing thread", threads_now(),
                before);
  usleep(200000);
  ck_assert_int_eq(__atomic_load_n(&closes, __ATOMIC_ACQUIRE), 0); /* (the check said quiet before it ended) */
  ck_assert_int_eq(mpn_ipc_closer_pending(), 1);
}
END_TEST

/* A device reset (core/renew.c): every import of the device, the exports
 * and a close still queued are forgotten, none of them closed (the mappings
 * went with the context, and their addresses may be mapped anew); imports
 * are then made afresh. */
START_TEST(forget_device_closes_nothing) {
  done[0] = 1;
  mpn_ipc_closer_set_quiet(test_quiet); /* (not quiet: the close below stays queued) */
  mpn_ipc_desc_t q = owner_range(1, base, 4096, 1), r = owner_range(2, base + 65536, 4096, 2);
  import_once(&q, event(0));
  import_once(&r, event(0));
  alloc_base = 0x200000000000ull, alloc_size = 1 << 20, alloc_id = 77;
  mpn_ipc_desc_t mine;
  int pool = 0;
  ck_assert_int_eq(mpn_ipc_export((void*)(uintptr_t)alloc_base, "test", &mine, &pool), ncclSuccess);
  ck_assert_int_eq(exports(), 1);
  mpn_ipc_forget(owner, 1, 0, NULL); /* q's close is queued */
  usleep(50000);
  ck_assert_int_eq(mpn_ipc_closer_pending(), 1);
  mpn_ipc_forget_device(0);
  ck_assert_int_eq(imports(), 0);
  ck_assert_int_eq(exports(), 0);
  ck_assert_int_eq(mpn_ipc_held_count(), 0);
  __atomic_store_n(&quiet_now, 1, __ATOMIC_RELEASE);
  ck_assert_int_eq(closed(), 0); /* the queued close was dropped, not run */
  ipc_model_reset_device();      /* nothing is mapped */
  import_once(&r, event(0));
  ck_assert_int_eq(imports(), 1);
  ck_assert_int_eq(open_count(), 1);
}
END_TEST

/* The start of the process's exit (mpn_ipc_closer_stop, from atexit)
 * waits for a close under way and starts no more, the process quiet or
 * not: CUDA's teardown comes next; the closing thread then ends, joined
 * by the stop.  A close handed over after it is left to the process's end,
 * not queued: no thread would serve it, and the last communicator's wait
 * for closes (mpn_ipc_closer_drain_for) would wait for it in vain (found in
 * review).  Last: nothing closes after it. */
static void* stop_in_thread(void* arg) {
  *(int*)arg = mpn_ipc_closer_stop(5000) + 1;
  return NULL;
}

START_TEST(stop_starts_no_close) {
  int before = threads_now();
  mpn_ipc_desc_t q, r;
  quiet_two_imports_held(&q, &r);
  mpn_ipc_forget(owner, 1, 0, NULL);
  usleep(100000);
  int stopped = 0; /* 0: waiting; then 1 + the stop's verdict */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, stop_in_thread, &stopped), 0);
  usleep(100000);
  ck_assert_int_eq(__atomic_load_n(&stopped, __ATOMIC_ACQUIRE), 0); /* it waits for the close under way */
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  pthread_join(t, NULL);
  ck_assert_int_eq(stopped, 2);
  ck_assert_int_eq(__atomic_load_n(&closes, __ATOMIC_ACQUIRE), 1);
  ck_assert_int_eq(threads_now(), before); /* the closing thread ended, joined by the stop */
  mpn_ipc_forget(owner, 2, 0, NULL);       /* r's close is handed over, the process quiet */
  usleep(200000);
  ck_assert_int_eq(__atomic_load_n(&closes, __ATOMIC_ACQUIRE), 1); /* and never run */
  ck_assert_int_eq(mpn_ipc_closer_pending(), 0);                   /* nor queued */
  ck_assert_int_eq(mpn_ipc_closer_drain_for(100), 1);
}
END_TEST

int main(void) {
  Suite* s = suite_create("ipc_closer");
  TCase* tc = tcase_create("closer");
  tcase_add_test(tc, import_never_waits_for_closes);
  tcase_add_test(tc, import_over_stale_waits_for_its_close);
  tcase_add_test(tc, import_over_stale_gives_up);
  tcase_add_test(tc, others_go_on_while_an_import_waits);
  tcase_add_test(tc, imports_wait_at_once);
  tcase_add_test(tc, held_imports_seen_by_owner);
  tcase_add_test(tc, closes_wait_for_quiet);
  tcase_add_test(tc, launch_goes_by_a_long_close);
  tcase_add_test(tc, no_close_beside_an_ungated_launch);
  tcase_add_test(tc, stop_during_quiet_check);
  tcase_add_test(tc, forget_device_closes_nothing);
  tcase_add_test(tc, stop_starts_no_close); /* (last: no close runs after it) */
  suite_add_tcase(s, tc);
  return unit_suite_run_forked(s); /* (its tests share the closing thread and the wrapped driver tables) */
}
