/*
 * test_stage.c - the process's staging buffers (src/p2p/stage.c) on the
 * host, against stand-ins (--wrap) for the CUDA calls that make one: the
 * sizes they are asked for, and the refusal of sizes no whole number of
 * IPC blocks can hold, in words that name the user's call.
 */
#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "cuda/ipc.h"
#include "p2p/stage.h"
#include "run_suite.h"

cudaError_t __wrap_cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  (void)mode;
  return cudaErrorNotSupported; /* nothing to give back */
}
cudaError_t __wrap_cudaGetLastError(void) { return cudaSuccess; }

/* cudaMalloc as CUDA answers it: 0 bytes "succeed" with NULL; more than
 * a device holds fail.  The sizes asked are kept. */
#define DEVICE_BYTES ((size_t)1 << 40)
static size_t asked[8];
static int nasked;
cudaError_t __wrap_cudaMalloc(void** ptr, size_t bytes) {
  if (nasked < 8) asked[nasked] = bytes;
  nasked++;
  if (bytes > DEVICE_BYTES) return cudaErrorMemoryAllocation;
  *ptr = bytes ? (void*)(uintptr_t)0x7e0000000000ull : NULL;
  return cudaSuccess;
}
cudaError_t __wrap_cudaFree(void* ptr) {
  (void)ptr;
  return cudaSuccess;
}
cudaError_t __wrap_cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  (void)flags;
  *ev = (cudaEvent_t)(uintptr_t)0x1000;
  return cudaSuccess;
}

/* A size that whole blocks cannot hold (rounding it up would wrap to 0
 * bytes) is refused before any allocation; the text names the public call
 * and the buffer the stage is for, and the size, for the user knows the
 * call, not the stage.  The largest size they hold is asked of CUDA as it
 * is, and its failure names the call too. */
START_TEST(sizes_near_size_max) {
  const size_t largest = SIZE_MAX - MPN_IPC_BLOCK_BYTES + 1;
  static const size_t too_large[] = {SIZE_MAX, SIZE_MAX - MPN_IPC_BLOCK_BYTES + 2};
  static const char* const fn[] = {"ncclSend", "ncclRecv"};
  static const char* const name[] = {"sendbuff", "recvbuff"};
  for (int i = 0; i < 2; i++) {
    mpn_stage_t* st = NULL;
    nasked = 0;
    ncclResult_t res = mpn_stage_get(NULL, fn[i], name[i], too_large[i], &st);
    char says[96];
    snprintf(says, sizeof(says), "%s: %s of %zu bytes", fn[i], name[i], too_large[i]);
    const char* text = mpn_error_last(NULL);
    ck_assert_msg(res == ncclInvalidArgument && st == NULL && nasked == 0 && strncmp(text, says, strlen(says)) == 0 &&
                      strstr(text, "too large"),
                  "%s's stage of %zu bytes: result %d, stage %p, %d allocation(s) (the first of %zu bytes), text "
                  "\"%s\", not opening with \"%s\"",
                  fn[i], too_large[i], (int)res, (void*)st, nasked, nasked ? asked[0] : 0, text, says);
  }
  mpn_stage_t* st = NULL;
  nasked = 0;
  ck_assert_int_eq(mpn_stage_get(NULL, "ncclSend", "sendbuff", largest, &st),
                   ncclUnhandledCudaError); /* (more than the device holds) */
  ck_assert_ptr_null(st);
  ck_assert_int_eq(nasked, 1);
  ck_assert_uint_eq(asked[0], largest);
  const char* text = mpn_error_last(NULL);
  ck_assert_msg(strncmp(text, "ncclSend: ", 10) == 0 && strstr(text, "sendbuff"),
                "a failed allocation's text \"%s\" does not name ncclSend and sendbuff", text);
}
END_TEST

/* A small message takes one whole block. */
START_TEST(small_size_takes_a_block) {
  mpn_stage_t* st = NULL;
  nasked = 0;
  ck_assert_int_eq(mpn_stage_get(NULL, "ncclRecv", "recvbuff", 1, &st), ncclSuccess);
  ck_assert_ptr_nonnull(st);
  ck_assert_int_eq(nasked, 1);
  ck_assert_uint_eq(asked[0], MPN_IPC_BLOCK_BYTES);
  ck_assert_ptr_nonnull(mpn_stage_ptr(st));
}
END_TEST

int main(void) {
  Suite* s = suite_create("stage");
  TCase* tc = tcase_create("sizes");
  tcase_add_test(tc, sizes_near_size_max);
  tcase_add_test(tc, small_size_takes_a_block);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
