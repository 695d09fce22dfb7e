/*
 * test_mem_free.c - ncclMemFree of memory that backs a live window is
 * deferred to the last window's end (src/cuda/memory.c, cuda/memory.h),
 * against a model of cudaMalloc and cudaFree that, as CUDA does, hands a
 * freed address to the next allocation, and of the device's context, which
 * cudaDeviceReset replaces (its memory gone with it).  No GPU needed.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "cuda/driver.h"
#include "cuda/ipc.h"
#include "cuda/memory.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "run_suite.h"

/* The model: SLOTS addresses of SLOT bytes each, the lowest free one first. */
enum { SLOTS = 8 };
#define SLOT ((size_t)16 << 20)
#define FIRST ((uintptr_t)1 << 40)
static int taken[SLOTS];
static unsigned long long slot_context[SLOTS]; /* the context that allocated it */
static int frees; /* cudaFree calls that freed a slot */

/* The model's devices 0 and 1, each with a context that a reset replaces
 * (a new id); the current device. */
static unsigned long long context[2] = {1, 1001};
static int current_device = 0;

cudaError_t __wrap_cudaMalloc(void** p, size_t size) {
  for (int i = 0; i < SLOTS && size <= SLOT; i++)
    if (!taken[i]) {
      taken[i] = 1;
      slot_context[i] = context[current_device > 0];
      *p = (void*)(FIRST + i * SLOT);
      return cudaSuccess;
    }
  return cudaErrorMemoryAllocation;
}

cudaError_t __wrap_cudaFree(void* p) {
  uintptr_t i = ((uintptr_t)p - FIRST) / SLOT;
  if ((uintptr_t)p < FIRST || i >= SLOTS || !taken[i]) return cudaErrorInvalidValue;
  taken[i] = 0;
  frees++;
  return cudaSuccess;
}

/* The export of a buffer in the model (for a window's description): its
 * slot as the allocation. */
ncclResult_t __wrap_mpn_ipc_export(const void* ptr, const char* what, mpn_ipc_desc_t* out, int* pool) {
  uintptr_t i = ((uintptr_t)ptr - FIRST) / SLOT;
  if ((uintptr_t)ptr < FIRST || i >= SLOTS || !taken[i])
    return MPN_REFUSE(NULL, ncclInvalidArgument, "%s %p is not device memory (of the model)", what, ptr);
  memset(out, 0, sizeof(*out));
  out->buffer_id = i + 1;
  out->base = FIRST + i * SLOT;
  out->offset = (uintptr_t)ptr - out->base;
  out->size = SLOT;
  *pool = 0;
  return ncclSuccess;
}

/* The current device's context.  The current device is -1 (none) while a
 * test makes communicators, which would otherwise set up device 0 through
 * the real CUDA. */
unsigned long long __wrap_mpn_cuda_context_id(void) { return context[current_device > 0]; }
int __wrap_mpn_cuda_current_device(void) { return current_device; }

/* cudaDeviceReset of dev, as the model sees it: its allocations are gone. */
static void model_reset_device(int dev) {
  for (int i = 0; i < SLOTS; i++)
    if (taken[i] && slot_context[i] == context[dev]) taken[i] = 0;
  context[dev]++;
}
static void model_reset(void) { model_reset_device(0); }

/* The driver's view of an address (the context of the allocation there),
 * only where a test asks for it: the other tests make communicators, which
 * use the real driver (none here). */
static int fake_driver_on;
static CUresult fake_attribute(void* out, CUpointer_attribute attr, CUdeviceptr ptr) {
  uintptr_t i = ((uintptr_t)ptr - FIRST) / SLOT;
  if (attr != CU_POINTER_ATTRIBUTE_CONTEXT || (uintptr_t)ptr < FIRST || i >= SLOTS || !taken[i])
    return CUDA_ERROR_INVALID_VALUE;
  *(CUcontext*)out = (CUcontext)(uintptr_t)slot_context[i];
  return CUDA_SUCCESS;
}
static CUresult fake_ctx_id(CUcontext ctx, unsigned long long* id) {
  *id = (unsigned long long)(uintptr_t)ctx;
  return CUDA_SUCCESS;
}
static const mpn_driver_t fake_driver = {.pointer_get_attribute = fake_attribute, .ctx_get_id = fake_ctx_id};
ncclResult_t __real_mpn_driver_get(const mpn_driver_t** out);
ncclResult_t __wrap_mpn_driver_get(const mpn_driver_t** out) {
  if (!fake_driver_on) return __real_mpn_driver_get(out);
  *out = &fake_driver;
  return ncclSuccess;
}

/* Each test counts its own frees (also when CK_FORK=no runs them in one process). */
static void frees_reset(void) { frees = 0; }

static char* alloc_mib(void) {
  void* p = NULL;
  ck_assert_int_eq(ncclMemAlloc(&p, 1 << 20), ncclSuccess);
  return p;
}

/* Whether the text ncclGetLastError gives holds what and the pointer p. */
static int last_error_names(const char* what, const void* p) {
  char name[32];
  snprintf(name, sizeof(name), "%p", p);
  const char* text = ncclGetLastError(NULL);
  return strstr(text, what) != NULL && strstr(text, name) != NULL;
}

/* Without a window the free is at once; other memory is not held. */
START_TEST(free_at_once) {
  char* b = alloc_mib();
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  ck_assert_int_eq(frees, 1);
  ck_assert_int_eq(ncclMemFree(b), ncclInvalidArgument);
  ck_assert(last_error_names("was not allocated by ncclMemAlloc", b));
  int on_stack;
  mpn_mem_alloc_t* pin = (mpn_mem_alloc_t*)&on_stack;
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", &on_stack, &pin), ncclSuccess);
  ck_assert_ptr_null(pin);
  mpn_mem_unpin(pin); /* nothing */
}
END_TEST

/* A window at an offset holds the memory: the free waits for its end, the
 * next allocation gets other memory, a second free and a new window are
 * refused, and the end of the window frees it. */
START_TEST(free_deferred_to_the_window) {
  char* b = alloc_mib();
  mpn_mem_alloc_t* pin = NULL;
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", b + 65536, &pin), ncclSuccess);
  ck_assert_ptr_nonnull(pin);
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  ck_assert_int_eq(frees, 0);
  ck_assert_int_eq(ncclMemFree(b), ncclInvalidArgument);
  ck_assert(last_error_names("was freed already", b));
  char* n = alloc_mib();
  ck_assert(n + (1 << 20) <= b || b + (1 << 20) <= n); /* the model would hand b back if freed */
  mpn_mem_alloc_t* again = NULL;
  ck_assert_int_eq(mpn_mem_pin(NULL, "ncclCommWindowRegister", b, &again), ncclInvalidArgument);
  ck_assert(last_error_names("ncclCommWindowRegister: buff", b));
  ck_assert_ptr_null(again);
  mpn_mem_unpin(pin);
  ck_assert_int_eq(frees, 1);
  ck_assert_int_eq(ncclMemFree(b), ncclInvalidArgument);
  ck_assert(last_error_names("was not allocated by ncclMemAlloc", b));
  ck_assert_int_eq(ncclMemFree(n), ncclSuccess);
  ck_assert_int_eq(frees, 2);
}
END_TEST

/* Two windows over one allocation: freed with the second's end only; a
 * window that ends before any free leaves the free at once. */
START_TEST(last_window_frees) {
  char* b = alloc_mib();
  mpn_mem_alloc_t *p1 = NULL, *p2 = NULL;
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", b, &p1), ncclSuccess);
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", b + 4096, &p2), ncclSuccess);
  ck_assert_ptr_eq(p1, p2);
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  mpn_mem_unpin(p1);
  ck_assert_int_eq(frees, 0);
  mpn_mem_unpin(p2);
  ck_assert_int_eq(frees, 1);
  char* c = alloc_mib();
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", c, &p1), ncclSuccess);
  mpn_mem_unpin(p1);
  ck_assert_int_eq(frees, 1);
  ck_assert_int_eq(ncclMemFree(c), ncclSuccess);
  ck_assert_int_eq(frees, 2);
}
END_TEST

/* A reset takes the device's memory: a pointer from before it then names
 * what was allocated since at its address, if anything; an ncclMemFree of
 * the old allocation frees nothing through CUDA, a window still over it
 * (a communicator that lived through the reset) lets it go without a
 * cudaFree, and new windows count on the new allocation. */
START_TEST(reset_forgets_records) {
  char* a = alloc_mib();
  char* b = alloc_mib();
  mpn_mem_alloc_t* survivor = NULL;
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", b, &survivor), ncclSuccess);
  model_reset();
  char* c = alloc_mib();
  ck_assert_ptr_eq(c, a); /* (the model hands the lowest free address out first) */
  mpn_mem_alloc_t* pin = NULL;
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", c, &pin), ncclSuccess);
  ck_assert_ptr_nonnull(pin);
  ck_assert_ptr_ne(pin, survivor);
  mpn_mem_unpin(pin);
  ck_assert_int_eq(ncclMemFree(c), ncclSuccess); /* the new allocation: freed */
  ck_assert_int_eq(frees, 1);
  ck_assert_int_eq(ncclMemFree(a), ncclSuccess); /* the old one at that address: nothing to free */
  ck_assert_int_eq(frees, 1);
  ck_assert_int_eq(ncclMemFree(a), ncclInvalidArgument);
  mpn_mem_unpin(survivor);
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  ck_assert_int_eq(frees, 1);
  ck_assert_int_eq(ncclMemFree(b), ncclInvalidArgument);
}
END_TEST

/* A reset of another device than the current one: forget_stale looks at
 * the current device only.  The program reset device 1, allocated there
 * with cudaMalloc (the model hands out the old address), then, with device
 * 0 current, frees the old ncclMemAlloc pointer: nothing may be freed
 * through CUDA, which would free the program's new allocation. */
START_TEST(reset_of_another_device) {
  fake_driver_on = 1;
  current_device = 1;
  char* a = alloc_mib();
  model_reset_device(1);
  void* mine = NULL;
  ck_assert_int_eq(cudaMalloc(&mine, 1 << 20), cudaSuccess);
  ck_assert_ptr_eq(mine, a); /* (the program's own allocation at the old address) */
  current_device = 0;
  char* b = alloc_mib(); /* device 0's own records are judged as before */
  ck_assert_int_eq(ncclMemFree(a), ncclSuccess);
  ck_assert_msg(frees == 0, "ncclMemFree of a pointer from before device 1's reset freed the program's new allocation");
  ck_assert_int_eq(ncclMemFree(a), ncclInvalidArgument);
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  ck_assert_int_eq(frees, 1);
  ck_assert_int_eq(cudaFree(mine), cudaSuccess);
  fake_driver_on = 0;
}
END_TEST

/* The same for windows: with device 0 current, records of device 1 from
 * before its reset, whose ncclMemFree waited for windows that outlived the
 * reset, neither free the program's new allocation at their address when
 * their window goes (b) nor refuse a window over it as memory ncclMemFree
 * freed (a). */
START_TEST(reset_of_another_device_windows) {
  fake_driver_on = 1;
  current_device = 1;
  char *a = alloc_mib(), *b = alloc_mib();
  mpn_mem_alloc_t *old_a = NULL, *old_b = NULL, *pin = NULL;
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", a, &old_a), ncclSuccess);
  ck_assert_int_eq(mpn_mem_pin(NULL, "test", b, &old_b), ncclSuccess);
  ck_assert_int_eq(ncclMemFree(a), ncclSuccess); /* deferred to the windows */
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  model_reset_device(1);
  void *mine_a = NULL, *mine_b = NULL;
  ck_assert_int_eq(cudaMalloc(&mine_a, 1 << 20), cudaSuccess);
  ck_assert_int_eq(cudaMalloc(&mine_b, 1 << 20), cudaSuccess);
  ck_assert(mine_a == a && mine_b == b);
  current_device = 0;
  mpn_mem_unpin(old_b);
  ck_assert_msg(frees == 0, "the window of before device 1's reset freed the program's new allocation as it went");
  ncclResult_t res = mpn_mem_pin(NULL, "ncclCommWindowRegister", mine_a, &pin);
  ck_assert_msg(res == ncclSuccess, "a window over the program's new allocation on device 1 was refused: \"%s\"",
                ncclGetLastError(NULL));
  ck_assert_ptr_null(pin); /* (plain cudaMalloc memory: nothing to hold) */
  mpn_mem_unpin(old_a);
  ck_assert_int_eq(frees, 0);
  ck_assert_int_eq(cudaFree(mine_a), cudaSuccess);
  ck_assert_int_eq(cudaFree(mine_b), cudaSuccess);
  fake_driver_on = 0;
}
END_TEST

/* A window registration whose rank refuses its own part (it runs past its
 * allocation) while its peer never registers: the allgather runs out, and
 * no rank can have a window over the part (a peer that got it refuses it).
 * Its hold on the memory goes, so an ncclMemFree frees it at once.  It was
 * held for good, as after a failure where a peer may have a window, and
 * the memory was never freed.  Two ranks of this process, given device 0
 * (the model's) so that the registration gets past its device checks. */
START_TEST(own_refusal_lets_memory_go) {
  use_local_bootstrap();
  set_param("MPINCCL_BOOTSTRAP_TIMEOUT", "1");
  ncclUniqueId id;
  ncclComm_t comms[2];
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  current_device = -1;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommInitRank(&comms[i], 2, id, i), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  current_device = 0;
  for (int i = 0; i < 2; i++) comms[i]->cuda_dev = 0;
  char* b = alloc_mib();
  ncclWindow_t win = (ncclWindow_t)b;
  ncclResult_t res = ncclCommWindowRegister(comms[0], b, 2 * SLOT, &win, 0);
  ck_assert_msg(res != ncclSuccess && res != ncclInProgress, "ncclCommWindowRegister: %d", res);
  ck_assert_ptr_null(win);
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  ck_assert_msg(frees == 1, "ncclMemFree freed %d allocations, not 1: \"%s\"", frees, ncclGetLastError(NULL));
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommAbort(comms[i]), ncclSuccess);
}
END_TEST

int main(void) {
  Suite* s = suite_create("mem_free");
  TCase* tc = tcase_create("deferred");
  tcase_add_checked_fixture(tc, frees_reset, NULL);
  tcase_add_test(tc, free_at_once);
  tcase_add_test(tc, free_deferred_to_the_window);
  tcase_add_test(tc, last_window_frees);
  tcase_add_test(tc, own_refusal_lets_memory_go);
  tcase_add_test(tc, reset_of_another_device);
  tcase_add_test(tc, reset_of_another_device_windows);
  tcase_add_test(tc, reset_forgets_records); /* (last: the model's context changes) */
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
