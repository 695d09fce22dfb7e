/*
 * test_ipc_cache.c - the export and import caches of src/cuda/ipc.c on the
 * host, against a model of the driver (ipc_model.h): look-ups, entries of
 * freed or recycled buffers, and the mappings they share or give up.
 * The closing thread and the waits for its closes: test_ipc_closer.c.
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "cuda/ipc.h"
#include "cuda/ipc_closer.h"
#include "ipc_model.h"
#include "rma/winshare.h"
#include "run_suite.h"

/* A peer that allocates a new buffer for each message at the same address:
 * the imports of the freed ones are closed once their copies are done
 * (before, each stayed for good, holding the owner's memory). */
START_TEST(import_freed_overlap_closed) {
  done[0] = 1;
  for (uint64_t id = 1; id <= 100; id++) {
    mpn_ipc_desc_t d = owner_buffer(id, size - (id % 3) * 4096, id);
    import_once(&d, event(0));
    ck_assert_int_le(imports(), 1);
    ck_assert_int_le(open_count(), 1);
  }
  ck_assert_int_eq(closed(), 99);
}
END_TEST

/* Still in use (its stream's copies not done): closed only once they are. */
START_TEST(import_freed_overlap_waits_for_copies) {
  done[0] = 0;
  done[1] = 1;
  mpn_ipc_desc_t a = owner_buffer(1, size, 1), b = owner_buffer(2, size, 2);
  import_once(&a, event(0));
  import_once(&b, event(1));
  ck_assert_int_eq(imports(), 2);
  ck_assert_int_eq(closed(), 0);
  done[0] = 1;
  import_once(&b, event(1));
  ck_assert_int_eq(imports(), 1);
  ck_assert_int_eq(closed(), 1);
}
END_TEST

/* The driver hands the freed buffer's handle to the new one and returns the
 * same mapping, counting the opens: the stale entry goes and its open is
 * closed, the new one keeps the mapping. */
START_TEST(import_recycled_handle) {
  done[0] = 1;
  mpn_ipc_desc_t a = owner_buffer(1, size, 7), b = owner_buffer(2, size, 7);
  import_once(&a, event(0));
  import_once(&b, event(0));
  ck_assert_int_eq(imports(), 1);
  ck_assert_int_eq(open_count(), 1);
  ck_assert_int_eq(closed(), 1);
  mpn_ipc_forget(owner, 2, 0, NULL);
  ck_assert_int_eq(imports(), 0);
  ck_assert_int_eq(open_count(), 0);
}
END_TEST

/* One import used from two streams (their own events): once both streams'
 * copies are done, a forgotten import is closed (before, it was pinned for
 * good by the second stream's event). */
START_TEST(import_two_streams_closable) {
  mpn_ipc_desc_t a = owner_buffer(1, size, 1);
  done[0] = done[1] = 0;
  import_once(&a, event(0));
  import_once(&a, event(1));
  mpn_ipc_forget(owner, 1, 0, NULL);
  ck_assert_int_eq(imports(), 1); /* copies still running */
  done[0] = 1;
  import_once(&a, event(1)); /* used again: not forgotten any more */
  mpn_ipc_forget(owner, 1, 0, NULL);
  ck_assert_int_eq(imports(), 1);
  done[1] = 1;
  mpn_ipc_forget(owner, 1, 0, NULL);
  ck_assert_int_eq(imports(), 0);
  ck_assert_int_eq(open_count(), 0);
}
END_TEST

/* An import handed out (its copies not yet issued) when the owner's new
 * allocation over it proves it freed: the report of use, or of capture,
 * that follows leaves it forgotten, so it is closed once idle (before, the
 * report took it back, and its mapping stayed open, holding the freed
 * memory, a mapping an import at its addresses could borrow as its own). */
START_TEST(stale_import_stays_forgotten_after_use) {
  done[0] = 0;
  done[1] = 1;
  mpn_ipc_desc_t a = owner_buffer(1, size, 1), b = owner_buffer(2, size, 2), c = owner_buffer(3, size, 3),
                 d = owner_buffer(4, size, 4);
  void* p = NULL;
  mpn_ipc_ref_t ref_a, ref_c;
  ck_assert_int_eq(mpn_ipc_import(owner, &a, &p, &ref_a), ncclSuccess);
  import_once(&b, event(1));
  ck_assert(!mpn_ipc_import_live(owner, 1, 0));
  mpn_ipc_mark_used(&ref_a, event(0), 0);
  ck_assert_msg(!mpn_ipc_import_live(owner, 1, 0), "the import of freed buffer 1 was taken back by its use");
  done[0] = 1;
  import_once(&c, event(1)); /* a's import, idle now, is closed; b's, stale and idle, too */
  expect_counts(1, 2, 1);
  ck_assert_int_eq(mpn_ipc_import(owner, &c, &p, &ref_c), ncclSuccess);
  import_once(&d, event(1));
  mpn_ipc_pin_t* pin = mpn_ipc_mark_captured(&ref_c);
  ck_assert_ptr_nonnull(pin);
  ck_assert_msg(!mpn_ipc_import_live(owner, 3, 0), "the import of freed buffer 3 was taken back by its capture");
  mpn_ipc_pin_gone(pin, 0, 1, 0);
}
END_TEST

/* More streams with copies running than an import tells apart: pinned. */
START_TEST(import_too_many_streams_pinned) {
  mpn_ipc_desc_t a = owner_buffer(1, size, 1);
  for (int k = 0; k <= MPN_IPC_USED_EVENTS; k++) {
    done[k] = 0;
    import_once(&a, event(k));
  }
  for (int k = 0; k <= MPN_IPC_USED_EVENTS; k++) done[k] = 1;
  mpn_ipc_forget(owner, 1, 0, NULL);
  ck_assert_int_eq(imports(), 1);
}
END_TEST

/* This process allocating a new buffer at the same address for each
 * message: the exports of the freed ones go (before, one entry each). */
START_TEST(export_freed_overlap_dropped) {
  alloc_base = base;
  for (uint64_t id = 1; id <= 100; id++) {
    alloc_id = id;
    alloc_size = size - (id % 3) * 4096;
    mpn_ipc_desc_t d;
    int pool = -1;
    ck_assert_int_eq(mpn_ipc_export((void*)(uintptr_t)(base + 256), "buff", &d, &pool), ncclSuccess);
    ck_assert_int_eq(pool, 0);
    ck_assert_uint_eq(d.buffer_id, id);
    ck_assert_uint_eq(d.offset, 256);
    ck_assert_uint_eq(d.size, alloc_size);
    ck_assert_int_eq(exports(), 1);
  }
}
END_TEST

/* Memory the library allocated for a peer to map (mpn_ipc_export_own):
 * exported where CUDA IPC shares it; where it cannot (the driver calls it
 * a pool's), refused with ncclInvalidUsage naming who and what, not left
 * for the caller to stage. */
START_TEST(own_memory_must_be_shareable) {
  alloc_base = base;
  alloc_size = size;
  alloc_id = 7;
  mpn_ipc_desc_t d;
  ck_assert_int_eq(mpn_ipc_export_own(NULL, "pair p", (void*)(uintptr_t)base, "the device flags", &d), ncclSuccess);
  ck_assert_uint_eq(d.buffer_id, 7);
  alloc_id = 8;
  alloc_pooled = 1;
  ck_assert_int_eq(mpn_ipc_export_own(NULL, "ncclSend", (void*)(uintptr_t)base, "the staging buffer", &d),
                   ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(mpn_error_last(NULL), "ncclSend: CUDA IPC cannot share the staging buffer 0x"));
}
END_TEST

/* A new allocation over a freed one still imported, of the same range
 * (freed and allocated again at the same size): the driver refuses it as
 * mapped, and the old import's mapping shows it, so it is borrowed before
 * anything is closed: no wait, though every close would wait. */
START_TEST(import_over_stale_same_range_borrows) {
  done[0] = 1;
  mpn_ipc_desc_t q = owner_range(1, base, 8192, 1), s1 = owner_range(2, base, 8192, 2);
  void *pq = NULL, *ps = NULL;
  mpn_ipc_ref_t ref;
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE); /* a close would hang the test */
  ck_assert_int_eq(mpn_ipc_import(owner, &q, &pq, &ref), ncclSuccess);
  mpn_ipc_mark_used(&ref, event(0), 0);
  ck_assert_int_eq(mpn_ipc_import(owner, &s1, &ps, &ref), ncclSuccess);
  mpn_ipc_mark_used(&ref, event(0), 0);
  ck_assert_ptr_eq(ps, pq);
  ck_assert_int_eq(imports(), 1); /* the stale entry went; its open is the new one's */
  ck_assert_int_eq(mpn_ipc_closer_pending(), 0);
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  mpn_ipc_forget(owner, 2, 0, NULL);
  ck_assert_int_eq(open_count(), 0);
}
END_TEST

/* A handle that came back for a smaller allocation returns the mapping of
 * the first, which keeps the first one's range: a later allocation in that
 * range but outside the smaller one is refused as mapped; while the smaller
 * one's copies are not issued yet (nothing can close its mapping), the
 * later one is found in that mapping (the driver's range of it, not the
 * entry's own).  (The GPU's test_p2p needs this on two GPUs: "resource
 * already mapped" at 2 processes without it.) */
START_TEST(import_in_recycled_mapping_borrows) {
  done[0] = 1;
  mpn_ipc_desc_t q = owner_range(1, base, 8192, 1), s1 = owner_range(2, base, 8192, 1),
                 t = owner_range(3, base + 4096, 4096, 3);
  s1.size = 4096; /* (its handle is q's, range and all) */
  void *ps = NULL, *pt = NULL;
  mpn_ipc_ref_t ref_s, ref_t;
  import_once(&q, event(0));
  ck_assert_int_eq(mpn_ipc_import(owner, &s1, &ps, &ref_s), ncclSuccess); /* handed out, not yet used */
  ck_assert_int_eq(open_count(), 1); /* q's open was closed: s1 has the mapping's */
  __atomic_store_n(&closes_held, 1, __ATOMIC_RELEASE);
  ck_assert_int_eq(mpn_ipc_import(owner, &t, &pt, &ref_t), ncclSuccess);
  ck_assert_ptr_eq(pt, (char*)ps + 4096);
  __atomic_store_n(&closes_held, 0, __ATOMIC_RELEASE);
  mpn_ipc_mark_used(&ref_s, event(0), 0);
  mpn_ipc_mark_used(&ref_t, event(0), 0);
}
END_TEST

/* Two live buffers of the owner that the driver maps in one mapping (as
 * in import_in_recycled_mapping_borrows), each under a window of this
 * process (rma/winshare.h): the last window of one going keeps the mapping
 * for the other (its close ended both imports, and the other window's next
 * put mapped it again); the last of both closes it. */
START_TEST(windows_of_one_mapping_keep_it) {
  done[0] = 1;
  mpn_ipc_desc_t q = owner_range(1, base, 8192, 1), s1 = owner_range(2, base, 8192, 1),
                 t = owner_range(3, base + 4096, 4096, 3);
  s1.size = 4096;
  void *ps = NULL, *pt = NULL;
  mpn_ipc_ref_t ref_s, ref_t;
  import_once(&q, event(0));
  ck_assert_int_eq(mpn_ipc_import(owner, &s1, &ps, &ref_s), ncclSuccess);
  ck_assert_int_eq(mpn_ipc_import(owner, &t, &pt, &ref_t), ncclSuccess);
  ck_assert_ptr_eq(pt, (char*)ps + 4096); /* one mapping */
  mpn_ipc_mark_used(&ref_s, event(0), 0);
  mpn_ipc_mark_used(&ref_t, event(0), 0);
  ck_assert(mpn_win_share_take(owner, 2, 0));
  ck_assert(mpn_win_share_take(owner, 3, 0));
  mpn_win_share_drop(owner, 3, 0, 1);
  ck_assert(mpn_ipc_import_live(owner, 2, 0));
  ck_assert_int_eq(open_count(), 1);
  void* again = NULL;
  ck_assert_int_eq(mpn_ipc_import(owner, &s1, &again, &ref_s), ncclSuccess);
  ck_assert_ptr_eq(again, ps);
  mpn_ipc_mark_used(&ref_s, event(0), 0);
  ck_assert_int_eq(open_count(), 1); /* no new open */
  mpn_win_share_drop(owner, 2, 0, 1);
  ck_assert(!mpn_ipc_import_live(owner, 2, 0));
  ck_assert(!mpn_ipc_import_live(owner, 3, 0));
  ck_assert_int_eq(open_count(), 0);
}
END_TEST

int main(void) {
  Suite* s = suite_create("ipc_cache");
  TCase* tc = tcase_create("cache");
  tcase_add_test(tc, import_freed_overlap_closed);
  tcase_add_test(tc, import_freed_overlap_waits_for_copies);
  tcase_add_test(tc, import_recycled_handle);
  tcase_add_test(tc, import_two_streams_closable);
  tcase_add_test(tc, import_too_many_streams_pinned);
  tcase_add_test(tc, stale_import_stays_forgotten_after_use);
  tcase_add_test(tc, export_freed_overlap_dropped);
  tcase_add_test(tc, own_memory_must_be_shareable);
  tcase_add_test(tc, import_over_stale_same_range_borrows);
  tcase_add_test(tc, import_in_recycled_mapping_borrows);
  tcase_add_test(tc, windows_of_one_mapping_keep_it);
  suite_add_tcase(s, tc);
  return unit_suite_run_forked(s); /* (its tests share the closing thread and the wrapped driver tables) */
}
