/*
 * test_ipc_cache.c - the export and import caches of src/cuda/ipc.c on the
 * host: the CUDA calls they make are replaced at link time (--wrap) by a
 * model of the driver (allocations of an owner process, handles, mappings
 * with counted opens, events that complete when the test says so).
 */
#include <check.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "cuda/driver.h"
#include "cuda/ipc.h"
#include "run_suite.h"

/* The model's mappings: one per handle, opened as many times as counted. */
enum { MAX_MAPPINGS = 512 };
static struct {
  cudaIpcMemHandle_t handle;
  int opens;
} mappings[MAX_MAPPINGS];
static int n_mappings, closes;

static char* mapping_ptr(int i) { return (char*)(uintptr_t)(0x100000000ull + (uint64_t)i * 0x10000000ull); }

/* Events: done[k] says whether event k completed. */
static int done[16];
static cudaEvent_t event(int k) { return (cudaEvent_t)(void*)&done[k]; }

/* This process's allocations, for exports: one live buffer id per base. */
static uint64_t alloc_base, alloc_size, alloc_id;

cudaError_t __wrap_cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaSetDevice(int dev) {
  (void)dev;
  return cudaSuccess;
}
cudaError_t __wrap_cudaGetLastError(void) { return cudaSuccess; }
cudaError_t __wrap_cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  (void)mode;
  return cudaErrorNotSupported; /* nothing to give back */
}
cudaError_t __wrap_cudaEventQuery(cudaEvent_t ev) { return *(int*)(void*)ev ? cudaSuccess : cudaErrorNotReady; }
cudaError_t __wrap_cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int flags) {
  (void)flags;
  int i = 0;
  while (i < n_mappings && (mappings[i].opens == 0 || memcmp(&mappings[i].handle, &handle, sizeof(handle)) != 0)) i++;
  if (i == n_mappings) {
    ck_assert_int_lt(n_mappings, MAX_MAPPINGS);
    mappings[n_mappings++].handle = handle;
  }
  mappings[i].opens++; /* the same handle again: the same mapping, counted */
  *ptr = mapping_ptr(i);
  return cudaSuccess;
}
cudaError_t __wrap_cudaIpcCloseMemHandle(void* ptr) {
  for (int i = 0; i < n_mappings; i++)
    if (mapping_ptr(i) == ptr) {
      ck_assert_int_gt(mappings[i].opens, 0);
      mappings[i].opens--;
      closes++;
      return cudaSuccess;
    }
  ck_abort_msg("closing %p, which was never opened", ptr);
  return cudaErrorInvalidValue;
}
cudaError_t __wrap_cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  (void)ptr;
  memset(handle, 0, sizeof(*handle));
  memcpy(handle, &alloc_id, sizeof(alloc_id));
  return cudaSuccess;
}

static CUresult fake_range(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  if (ptr < alloc_base || ptr >= alloc_base + alloc_size) return CUDA_ERROR_INVALID_VALUE;
  *base = alloc_base;
  *size = alloc_size;
  return CUDA_SUCCESS;
}
static CUresult fake_attribute(void* out, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (ptr < alloc_base || ptr >= alloc_base + alloc_size) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_POINTER_ATTRIBUTE_BUFFER_ID)
    *(unsigned long long*)out = alloc_id;
  else if (attr == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
    *(CUmemoryPool*)out = NULL;
  else
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
static const mpn_driver_t fake_driver = {.mem_get_address_range = fake_range, .pointer_get_attribute = fake_attribute};
ncclResult_t __wrap_mpn_driver_get(const mpn_driver_t** out) {
  *out = &fake_driver;
  return ncclSuccess;
}

static const uint64_t owner = 0x1234;
static const uint64_t base = 0x7f0000000000ull, size = 2 << 20;

/* A buffer of owner: buffer id, the allocation at base, a handle of its own
 * (or, with handle_of, the handle of buffer handle_of: the driver recycled it). */
static mpn_ipc_desc_t owner_buffer(uint64_t id, uint64_t bytes, uint64_t handle_of) {
  mpn_ipc_desc_t d;
  memset(&d, 0, sizeof(d));
  d.buffer_id = id;
  d.base = base;
  d.size = bytes;
  memcpy(&d.handle, &handle_of, sizeof(handle_of));
  return d;
}

static void import_once(const mpn_ipc_desc_t* d, cudaEvent_t used) {
  void* p = NULL;
  mpn_ipc_ref_t ref;
  ck_assert_int_eq(mpn_ipc_import(owner, d, &p, &ref), ncclSuccess);
  ck_assert_ptr_nonnull(p);
  mpn_ipc_mark_used(&ref, used, 0);
}

static int imports(void) {
  int e = 0, i = 0;
  mpn_ipc_counts(&e, &i);
  return i;
}

static int exports(void) {
  int e = 0, i = 0;
  mpn_ipc_counts(&e, &i);
  return e;
}

static int open_count(void) {
  int n = 0;
  for (int i = 0; i < n_mappings; i++) n += mappings[i].opens;
  return n;
}

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
  ck_assert_int_eq(closes, 99);
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
  ck_assert_int_eq(closes, 0);
  done[0] = 1;
  import_once(&b, event(1));
  ck_assert_int_eq(imports(), 1);
  ck_assert_int_eq(closes, 1);
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
  ck_assert_int_eq(closes, 1);
  mpn_ipc_forget(owner, 2, 0);
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
  mpn_ipc_forget(owner, 1, 0);
  ck_assert_int_eq(imports(), 1); /* copies still running */
  done[0] = 1;
  import_once(&a, event(1)); /* used again: not forgotten any more */
  mpn_ipc_forget(owner, 1, 0);
  ck_assert_int_eq(imports(), 1);
  done[1] = 1;
  mpn_ipc_forget(owner, 1, 0);
  ck_assert_int_eq(imports(), 0);
  ck_assert_int_eq(open_count(), 0);
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
  mpn_ipc_forget(owner, 1, 0);
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

int main(void) {
  Suite* s = suite_create("ipc_cache");
  TCase* tc = tcase_create("cache");
  tcase_add_test(tc, import_freed_overlap_closed);
  tcase_add_test(tc, import_freed_overlap_waits_for_copies);
  tcase_add_test(tc, import_recycled_handle);
  tcase_add_test(tc, import_two_streams_closable);
  tcase_add_test(tc, import_too_many_streams_pinned);
  tcase_add_test(tc, export_freed_overlap_dropped);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
