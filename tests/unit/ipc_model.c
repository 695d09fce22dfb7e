/*
 * ipc_model.c - a model of the CUDA driver for the IPC caches' tests
 * (ipc_model.h): allocations of an owner process, handles, mappings with
 * counted opens, memory mapped once, events that complete when the test
 * says so, closes that wait while the test holds the "device".
 */
#include "ipc_model.h"

#include <check.h>
#include <cuda.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "cuda/driver.h"
#include "cuda/ipc_closer.h"

/* The model's mappings: one per handle, opened as many times as counted. */
enum { MAX_MAPPINGS = 512 };
static struct {
  cudaIpcMemHandle_t handle;
  int opens;
} mappings[MAX_MAPPINGS];
static int n_mappings;
int closes;
/* The closing thread's closes may run beside an import's open. */
static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;

char* mapping_ptr(int i) { return (char*)(uintptr_t)(0x100000000ull + (uint64_t)i * 0x10000000ull); }

void ipc_model_reset_device(void) {
  pthread_mutex_lock(&model_lock);
  memset(mappings, 0, sizeof(mappings));
  n_mappings = 0;
  pthread_mutex_unlock(&model_lock);
}

int done[16];
cudaEvent_t event(int k) { return (cudaEvent_t)(void*)&done[k]; }

uint64_t alloc_base, alloc_size, alloc_id;
int alloc_pooled;

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
/* A handle's range in the owner's space (bytes 8-23; size 0: not modelled). */
static void handle_range(const cudaIpcMemHandle_t* h, uint64_t* at, uint64_t* bytes) {
  memcpy(at, (const char*)h + 8, sizeof(*at));
  memcpy(bytes, (const char*)h + 16, sizeof(*bytes));
}

/* Memory is mapped once: a handle whose range overlaps that of another
 * handle open here is refused, as the driver refuses a new allocation over a
 * freed one still imported. */
static int mapped_already(const cudaIpcMemHandle_t* h) {
  uint64_t at, bytes;
  handle_range(h, &at, &bytes);
  for (int i = 0; i < n_mappings && bytes; i++) {
    uint64_t o_at, o_bytes;
    handle_range(&mappings[i].handle, &o_at, &o_bytes);
    if (mappings[i].opens > 0 && memcmp(&mappings[i].handle, h, sizeof(*h)) != 0 && o_at < at + bytes &&
        at < o_at + o_bytes)
      return 1;
  }
  return 0;
}

int closes_held;

cudaError_t __wrap_cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int flags) {
  (void)flags;
  pthread_mutex_lock(&model_lock);
  int refused = mapped_already(&handle), i = 0;
  while (!refused && i < n_mappings &&
         (mappings[i].opens == 0 || memcmp(&mappings[i].handle, &handle, sizeof(handle)) != 0))
    i++;
  if (!refused && i == n_mappings) {
    ck_assert_int_lt(n_mappings, MAX_MAPPINGS);
    mappings[n_mappings++].handle = handle;
  }
  if (!refused) mappings[i].opens++; /* the same handle again: the same mapping, counted */
  pthread_mutex_unlock(&model_lock);
  if (refused) return cudaErrorAlreadyMapped;
  *ptr = mapping_ptr(i);
  return cudaSuccess;
}
cudaError_t __wrap_cudaIpcCloseMemHandle(void* ptr) {
  while (__atomic_load_n(&closes_held, __ATOMIC_ACQUIRE)) usleep(1000);
  pthread_mutex_lock(&model_lock);
  int i = 0;
  while (i < n_mappings && mapping_ptr(i) != ptr) i++;
  ck_assert_msg(i < n_mappings, "closing %p, which was never opened", ptr);
  ck_assert_int_gt(mappings[i].opens, 0);
  mappings[i].opens--;
  __atomic_add_fetch(&closes, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&model_lock);
  return cudaSuccess;
}
cudaError_t __wrap_cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  (void)ptr;
  memset(handle, 0, sizeof(*handle));
  memcpy(handle, &alloc_id, sizeof(alloc_id));
  return cudaSuccess;
}

static CUresult fake_range_locked(CUdeviceptr* at_out, size_t* size_out, CUdeviceptr ptr) {
  for (int i = 0; i < n_mappings; i++) { /* an open mapping: the range of its handle */
    uint64_t at, bytes;
    handle_range(&mappings[i].handle, &at, &bytes);
    CUdeviceptr m = (CUdeviceptr)(uintptr_t)mapping_ptr(i);
    if (mappings[i].opens > 0 && ptr >= m && ptr < m + bytes) {
      *at_out = m;
      *size_out = bytes;
      return CUDA_SUCCESS;
    }
  }
  if (ptr < alloc_base || ptr >= alloc_base + alloc_size) return CUDA_ERROR_INVALID_VALUE;
  *at_out = alloc_base;
  *size_out = alloc_size;
  return CUDA_SUCCESS;
}
static CUresult fake_range(CUdeviceptr* at_out, size_t* size_out, CUdeviceptr ptr) {
  pthread_mutex_lock(&model_lock);
  CUresult res = fake_range_locked(at_out, size_out, ptr);
  pthread_mutex_unlock(&model_lock);
  return res;
}
static CUresult fake_attribute(void* out, CUpointer_attribute attr, CUdeviceptr ptr) {
  if (ptr < alloc_base || ptr >= alloc_base + alloc_size) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_POINTER_ATTRIBUTE_BUFFER_ID)
    *(unsigned long long*)out = alloc_id;
  else if (attr == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
    *(CUmemoryPool*)out = alloc_pooled ? (CUmemoryPool)(uintptr_t)0x1 : NULL;
  else
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
static const mpn_driver_t fake_driver = {.mem_get_address_range = fake_range, .pointer_get_attribute = fake_attribute};
ncclResult_t __wrap_mpn_driver_get(const mpn_driver_t** out) {
  *out = &fake_driver;
  return ncclSuccess;
}

mpn_ipc_desc_t owner_buffer(uint64_t id, uint64_t bytes, uint64_t handle_of) {
  mpn_ipc_desc_t d;
  memset(&d, 0, sizeof(d));
  d.buffer_id = id;
  d.base = base;
  d.size = bytes;
  memcpy(&d.handle, &handle_of, sizeof(handle_of));
  return d;
}

mpn_ipc_desc_t owner_range(uint64_t id, uint64_t at, uint64_t bytes, uint64_t handle_of) {
  mpn_ipc_desc_t d = owner_buffer(id, bytes, handle_of);
  d.base = at;
  memcpy((char*)&d.handle + 8, &at, sizeof(at));
  memcpy((char*)&d.handle + 16, &bytes, sizeof(bytes));
  return d;
}

void import_once(const mpn_ipc_desc_t* d, cudaEvent_t used) {
  void* p = NULL;
  mpn_ipc_ref_t ref;
  ck_assert_int_eq(mpn_ipc_import(owner, d, &p, &ref), ncclSuccess);
  ck_assert_ptr_nonnull(p);
  mpn_ipc_mark_used(&ref, used, 0);
}

int closed(void) {
  mpn_ipc_closer_drain();
  return closes;
}

int imports(void) {
  int e = 0, i = 0;
  mpn_ipc_counts(&e, &i);
  return i;
}

int exports(void) {
  int e = 0, i = 0;
  mpn_ipc_counts(&e, &i);
  return e;
}

int open_count(void) {
  mpn_ipc_closer_drain();
  int n = 0;
  pthread_mutex_lock(&model_lock);
  for (int i = 0; i < n_mappings; i++) n += mappings[i].opens;
  pthread_mutex_unlock(&model_lock);
  return n;
}

void expect_counts(int n_imports, int n_closed, int n_open) {
  ck_assert_int_eq(closed(), n_closed);
  ck_assert_int_eq(imports(), n_imports);
  ck_assert_int_eq(open_count(), n_open);
}
