// test_copy_range.cc - the copy loop of the copy kernels (src/cuda/copy_range.cuh),
// run on the host one "thread" after another: every alignment of source and
// destination, sizes around the word and unroll boundaries, bytes outside
// the copy untouched.
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "cuda/copy_range.cuh"
#include "run_suite.h"

namespace {

constexpr size_t kPad = 64;

// Copies bytes from src + so to dst + dn as `threads` threads of the given stride would.
bool copy_checks(size_t so, size_t dn, size_t bytes, size_t threads) {
  static unsigned char src[70000], dst[70000];
  for (size_t i = 0; i < sizeof(src); i++) src[i] = (unsigned char)(i * 131 + 7), dst[i] = 0xA5;
  for (size_t t = 0; t < threads; t++) mpn::copy_range(src + kPad + so, dst + kPad + dn, bytes, t, threads);
  for (size_t i = 0; i < sizeof(dst); i++) {
    bool inside = i >= kPad + dn && i < kPad + dn + bytes;
    unsigned char want = inside ? src[i - dn + so] : 0xA5;
    if (dst[i] != want) {
      fprintf(stderr, "src+%zu -> dst+%zu, %zu bytes, %zu threads: byte %zu is %u, not %u\n", so, dn, bytes,
              threads, i, dst[i], want);
      return false;
    }
  }
  return true;
}

}  // namespace

START_TEST(every_alignment) {
  static const size_t sizes[] = {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 4099};
  for (size_t so = 0; so < 16; so++)
    for (size_t dn = 0; dn < 16; dn++)
      for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        ck_assert(copy_checks(so, dn, sizes[k], 3));
}
END_TEST

// Large enough for the unrolled loop (8 words per thread per step) and its rest.
START_TEST(unrolled) {
  static const size_t sizes[] = {8 * 16 * 4, 8 * 16 * 4 + 16, 65536, 65536 + 5, 60001};
  static const size_t threads[] = {1, 4, 7, 64};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
    for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++)
      for (size_t so = 0; so < 16; so += 3) {
        ck_assert(copy_checks(so, so, sizes[k], threads[t]));     // 16-byte words
        ck_assert(copy_checks(so, so + 8, sizes[k], threads[t])); // 8-byte words
        ck_assert(copy_checks(so, so + 1, sizes[k], threads[t])); // bytes
      }
}
END_TEST

int main() {
  Suite* s = suite_create("copy_range");
  TCase* tc = tcase_create("copy_range");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, every_alignment);
  tcase_add_test(tc, unrolled);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
