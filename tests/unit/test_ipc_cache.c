/*
 * test_ipc_cache.c - the export and import caches of src/cuda/ipc.c on the
 * host: the CUDA calls they make are replaced at link time (--wrap) by a
 * model of the driver (allocations of an owner process, handles, mappings
 * with counted opens, memory mapped once, events that complete when the
 * test says so, closes that wait while the test holds the "device").
 */
#include <check.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "cuda/driver.h"
#include "cuda/ipc.h"
#include "cuda/ipc_closer.h"
#include "cuda/ipc_held.h"
#include "rma/winshare.h"
#include "run_suite.h"

/* The model's mappings: one per handle, opened as many times as counted. */
enum { MAX_MAPPINGS = 512 };
static struct {
  cudaIpcMemHandle_t handle;
  int opens;
} mappings[MAX_MAPPINGS];
static int n_mappings, closes;
/* The closing thread's closes may run beside an import's open. */
static pthread_mutex_t model_lock = PTHREAD_MUTEX_INITIALIZER;

static char* mapping_ptr(int i) { return (char*)(uintptr_t)(0x100000000ull + (uint64_t)i * 0x10000000ull); }

/* Events: done[k] says whether event k completed. */
static int done[16];
static cudaEvent_t event(int k) { return (cudaEvent_t)(void*)&done[k]; }

/* This process's allocations, for exports: one live buffer id per base;
 * alloc_pooled: the driver says it is a memory pool's. */
static uint64_t alloc_base, alloc_size, alloc_id;
static int alloc_pooled;

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

/* While set, closes wait (the device's work waits for a peer). */
static int closes_held;

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

static CUresult fake_range_locked(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  for (int i = 0; i < n_mappings; i++) { /* an open mapping: the range of its handle */
    uint64_t at, bytes;
    handle_range(&mappings[i].handle, &at, &bytes);
    CUdeviceptr m = (CUdeviceptr)(uintptr_t)mapping_ptr(i);
    if (mappings[i].opens > 0 && ptr >= m && ptr < m + bytes) {
      *base = m;
      *size = bytes;
      return CUDA_SUCCESS;
    }
  }
  if (ptr < alloc_base || ptr >= alloc_base + alloc_size) return CUDA_ERROR_INVALID_VALUE;
  *base = alloc_base;
  *size = alloc_size;
  return CUDA_SUCCESS;
}
static CUresult fake_range(CUdeviceptr* base, size_t* size, CUdeviceptr ptr) {
  pthread_mutex_lock(&model_lock);
  CUresult res = fake_range_locked(base, size, ptr);
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

/* A buffer of owner at [at, at + bytes) whose handle (handle_of) the model
 * maps once by range. */
static mpn_ipc_desc_t owner_range(uint64_t id, uint64_t at, uint64_t bytes, uint64_t handle_of) {
  mpn_ipc_desc_t d = owner_buffer(id, bytes, handle_of);
  d.base = at;
  memcpy((char*)&d.handle + 8, &at, sizeof(at));
  memcpy((char*)&d.handle + 16, &bytes, sizeof(bytes));
  return d;
}

static void import_once(const mpn_ipc_desc_t* d, cudaEvent_t used) {
  void* p = NULL;
  mpn_ipc_ref_t ref;
  ck_assert_int_eq(mpn_ipc_import(owner, d, &p, &ref), ncclSuccess);
  ck_assert_ptr_nonnull(p);
  mpn_ipc_mark_used(&ref, used, 0);
}

/* Closes made, once the closing thread has closed what it was handed. */
static int closed(void) {
  mpn_ipc_closer_drain();
  return closes;
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

/* Opens left, once the closing thread has closed what it was handed. */
static int open_count(void) {
  mpn_ipc_closer_drain();
  int n = 0;
  pthread_mutex_lock(&model_lock);
  for (int i = 0; i < n_mappings; i++) n += mappings[i].opens;
  pthread_mutex_unlock(&model_lock);
  return n;
}

/* The imports cached, closes made and opens left once the closing thread
 * has closed what it was handed. */
static void expect_counts(int n_imports, int n_closed, int n_open) {
  ck_assert_int_eq(closed(), n_closed);
  ck_assert_int_eq(imports(), n_imports);
  ck_assert_int_eq(open_count(), n_open);
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

/* A stop (mpn_ipc_closer_stop, at the process's exit) that comes while the
 * closing thread asks whether the process is quiet finds no close running
 * and says so: that close must then not start, quiet or not (found in
 * review). */
START_TEST(stop_during_quiet_check) {
  close_in_slow_check();
  ck_assert_int_eq(mpn_ipc_closer_stop(1000), 1); /* no close runs yet */
  usleep(400000);                                 /* the check says quiet meanwhile */
  ck_assert_int_eq(__atomic_load_n(&closes, __ATOMIC_ACQUIRE), 0);
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
  ck_assert_int_eq(closed(), 0);         /* the queued close was dropped, not run */
  memset(mappings, 0, sizeof(mappings)); /* the model's device was reset: nothing is mapped */
  n_mappings = 0;
  import_once(&r, event(0));
  ck_assert_int_eq(imports(), 1);
  ck_assert_int_eq(open_count(), 1);
}
END_TEST

/* The start of the process's exit (mpn_ipc_closer_stop, from atexit)
 * waits for a close under way and starts no more, the process quiet or
 * not: CUDA's teardown comes next.  Last: nothing closes after it. */
static void* stop_in_thread(void* arg) {
  *(int*)arg = mpn_ipc_closer_stop(5000) + 1;
  return NULL;
}

START_TEST(stop_starts_no_close) {
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
  mpn_ipc_forget(owner, 2, 0, NULL); /* r's close is queued, the process quiet */
  usleep(200000);
  ck_assert_int_eq(__atomic_load_n(&closes, __ATOMIC_ACQUIRE), 1); /* and never run */
  ck_assert_int_eq(mpn_ipc_closer_pending(), 1);
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
  tcase_add_test(tc, import_never_waits_for_closes);
  tcase_add_test(tc, import_over_stale_same_range_borrows);
  tcase_add_test(tc, import_in_recycled_mapping_borrows);
  tcase_add_test(tc, windows_of_one_mapping_keep_it);
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
