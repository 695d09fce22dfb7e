/*
 * test_ucx_prefix.c - the tag prefixes of the process's live UCX
 * communicators (src/ucx/prefix.c): a prefix one key holds is refused to
 * another, held again by the same key (ranks of one communicator in one
 * process) until each hold is released, kept from other keys a while after
 * it is freed, and never given to two keys by threads reserving at once;
 * the candidates a key tries.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>

#include "ucx/prefix.h"
#include "run_suite.h"

/* Reserves prefix for key; returns whether another key holds it. */
static int reserve(uint32_t prefix, uint64_t key) {
  int taken = -1;
  ck_assert_int_eq(mpn_ucx_prefix_reserve(prefix, key, &taken), ncclSuccess);
  ck_assert(taken == 0 || taken == 1);
  return taken;
}

/* Frees MPN_UCX_PREFIX_RECENT other prefixes (a key of its own): those
 * freed before are anyone's again. */
static void recent_flush(void) {
  for (uint32_t i = 0; i < MPN_UCX_PREFIX_RECENT; i++) {
    ck_assert_int_eq(reserve(0x800000 + i, 1000), 0);
    mpn_ucx_prefix_release(0x800000 + i, 1000);
  }
}

START_TEST(other_key_refused) {
  ck_assert_int_eq(reserve(0x123456, 1), 0);
  ck_assert_int_eq(reserve(0x123456, 2), 1);
  ck_assert_int_eq(reserve(0x123457, 2), 0); /* another prefix */
  mpn_ucx_prefix_release(0x123456, 1);
  ck_assert_int_eq(reserve(0x123456, 2), 1); /* freed, but lately: a message of key 1's may wait */
  recent_flush();
  ck_assert_int_eq(reserve(0x123456, 2), 0); /* free again */
  ck_assert_int_eq(reserve(0x123456, 1), 1);
  mpn_ucx_prefix_release(0x123456, 2);
  mpn_ucx_prefix_release(0x123457, 2);
}
END_TEST

START_TEST(same_key_counted) {
  ck_assert_int_eq(reserve(0xabcdef, 7), 0);
  ck_assert_int_eq(reserve(0xabcdef, 7), 0); /* a second rank of the communicator */
  mpn_ucx_prefix_release(0xabcdef, 7);
  ck_assert_int_eq(reserve(0xabcdef, 8), 1); /* still held by the other rank */
  mpn_ucx_prefix_release(0xabcdef, 7);
  recent_flush();
  ck_assert_int_eq(reserve(0xabcdef, 8), 0);
  mpn_ucx_prefix_release(0xabcdef, 8);
}
END_TEST

/* A release by a key that does not hold the prefix changes nothing. */
START_TEST(release_by_other_key_ignored) {
  ck_assert_int_eq(reserve(0x000001, 3), 0);
  mpn_ucx_prefix_release(0x000001, 4);
  ck_assert_int_eq(reserve(0x000001, 4), 1);
  mpn_ucx_prefix_release(0x000001, 3);
  recent_flush();
  ck_assert_int_eq(reserve(0x000001, 4), 0);
  mpn_ucx_prefix_release(0x000001, 4);
}
END_TEST

enum { THREADS = 4, PREFIXES = 4, ROUNDS = 20000 };

/* Per prefix: the key that the test saw take it (0: none). */
static uint64_t owner[PREFIXES];
static int clashes;

/* A thread of its own key reserves and releases the few prefixes over and
 * over; a reserve that succeeds while the test's record names another key
 * is a prefix given to two keys. */
static void* contend(void* arg) {
  uint64_t key = (uint64_t)(uintptr_t)arg;
  for (int r = 0; r < ROUNDS; r++) {
    uint32_t prefix = (uint32_t)((r + key) % PREFIXES);
    int taken = 1;
    if (mpn_ucx_prefix_reserve(prefix, key, &taken) != ncclSuccess || taken) continue;
    uint64_t none = 0;
    if (!__atomic_compare_exchange_n(&owner[prefix], &none, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      __atomic_add_fetch(&clashes, 1, __ATOMIC_RELAXED);
    else {
      sched_yield(); /* holding it a while: a second key would find the record taken */
      __atomic_store_n(&owner[prefix], 0, __ATOMIC_RELEASE);
    }
    mpn_ucx_prefix_release(prefix, key);
  }
  return NULL;
}

START_TEST(threads_never_share) {
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, contend, (void*)(i + 1)), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  ck_assert_int_eq(clashes, 0);
  recent_flush();
  for (uint32_t p = 0; p < PREFIXES; p++) ck_assert_int_eq(reserve(p, 99), 0); /* every hold released */
  for (uint32_t p = 0; p < PREFIXES; p++) mpn_ucx_prefix_release(p, 99);
}
END_TEST

/* Attempt 0 is the prefix tags always had; keys that meet there part at
 * attempt 1, and every candidate has 24 bits. */
START_TEST(candidates) {
  const uint64_t keys[] = {0, 1, 0x0123456789abcdefull, 0xfedcba9876543210ull, 0x8000000000000000ull};
  for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
    uint64_t k = keys[i];
    ck_assert_uint_eq(mpn_ucx_prefix_candidate(k, 0), (k ^ (k >> 24)) & 0xffffff);
    /* Other keys with the same fold: bit 63 is outside it; bits 0 and 24 cancel. */
    uint64_t twins[] = {k ^ (1ull << 63), k ^ (1ull << 24 | 1), k ^ (0xffull << 40 | 0xff << 16)};
    for (size_t j = 0; j < sizeof(twins) / sizeof(twins[0]); j++) {
      ck_assert_uint_eq(mpn_ucx_prefix_candidate(twins[j], 0), mpn_ucx_prefix_candidate(k, 0));
      ck_assert_uint_ne(mpn_ucx_prefix_candidate(twins[j], 1), mpn_ucx_prefix_candidate(k, 1));
    }
    for (int a = 0; a < 64; a++) {
      ck_assert_uint_le(mpn_ucx_prefix_candidate(k, a), 0xffffff);
      ck_assert_uint_eq(mpn_ucx_prefix_candidate(k, a), mpn_ucx_prefix_candidate(k, a)); /* pure */
    }
    ck_assert_uint_ne(mpn_ucx_prefix_candidate(k, 1), mpn_ucx_prefix_candidate(k, 2));
  }
}
END_TEST

int main(void) {
  Suite* s = suite_create("ucx_prefix");
  TCase* tc = tcase_create("ucx_prefix");
  tcase_add_test(tc, other_key_refused);
  tcase_add_test(tc, same_key_counted);
  tcase_add_test(tc, release_by_other_key_ignored);
  tcase_add_test(tc, threads_never_share);
  tcase_add_test(tc, candidates);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
