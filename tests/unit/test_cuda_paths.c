/*
 * test_cuda_paths.c - error paths of src/cuda's helpers on the host, against
 * stand-ins (--wrap) for the CUDA calls they make: what a failure leaves
 * held, and whether the program's own unread CUDA error survives.
 */
#include <check.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/device.h"
#include "cuda/event.h"
#include "cuda/lanes.h"
#include "cuda/sync.h"
#include "run_suite.h"

/* Reads of CUDA's last error: each would take an unread error of the program's. */
static int last_error_reads;
cudaError_t __wrap_cudaGetLastError(void) {
  last_error_reads++;
  return cudaSuccess;
}
cudaError_t __wrap_cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  (void)mode;
  return cudaSuccess;
}
cudaError_t __wrap_cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaSetDevice(int dev) {
  (void)dev;
  return cudaSuccess;
}

/* The counters of flag kernels of several blocks: their device memory comes,
 * the host words too, then the device's multiprocessors cannot be had. */
static int host_held; /* mapped host allocations not freed */
cudaError_t __wrap_mpn_cuda_alloc_zeroed(size_t bytes, size_t zero_bytes, void** out) {
  (void)bytes, (void)zero_bytes;
  *out = (void*)(uintptr_t)0x10000;
  return cudaSuccess;
}
cudaError_t __wrap_cudaFree(void* p) {
  (void)p;
  return cudaSuccess;
}
cudaError_t __wrap_mpn_cuda_host_mapped(size_t bytes, void** host, CUdeviceptr* dev) {
  *host = calloc(1, bytes);
  *dev = (CUdeviceptr)(uintptr_t)*host;
  host_held++;
  return cudaSuccess;
}
cudaError_t __wrap_cudaFreeHost(void* p) {
  free(p);
  host_held--;
  return cudaSuccess;
}
cudaError_t __wrap_cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int dev) {
  (void)value, (void)attr, (void)dev;
  return cudaErrorInvalidDevice;
}

START_TEST(grid_pool_failure_frees_host_words) {
  mpn_sync_grid_prepare(0);
  ck_assert_msg(host_held == 0, "%d mapped host allocation(s) of a pool that could not be made are held", host_held);
  mpn_sync_t k;
  mpn_sync_init(&k);
  ck_assert(mpn_sync_push_copy(&k, 0, (mpn_copy_t){(void*)1, (void*)2, 4u << 20, NULL, NULL}));
  mpn_sync_grid_take(0, 1, &k);
  ck_assert_int_eq(k.grid.blocks, 1); /* no pool: one block */
}
END_TEST

/* A stream that is not capturing (any more): the refusal is the library's,
 * which CUDA never recorded, so nothing is cleared. */
cudaError_t __wrap_cudaStreamGetCaptureInfo(cudaStream_t s, enum cudaStreamCaptureStatus* status,
                                            unsigned long long* id, cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                            const cudaGraphEdgeData** edges, size_t* n) {
  (void)s, (void)id, (void)deps, (void)edges, (void)n;
  *status = cudaStreamCaptureStatusInvalidated;
  if (graph) *graph = NULL;
  return cudaSuccess;
}
static void never(void* arg) { (void)arg; }

START_TEST(not_capturing_keeps_program_error) {
  last_error_reads = 0;
  ck_assert_int_ne(mpn_cuda_capture_on_destroy((cudaStream_t)0x1, never, NULL), ncclSuccess);
  ck_assert_msg(last_error_reads == 0, "CUDA's last error was read %d time(s) for a refusal CUDA never recorded",
                last_error_reads);
}
END_TEST

/* Streams as a program makes them: CUDA's id of the stream a handle names
 * now, and events, of which one may have a record still running. */
static unsigned long long stream_id_now;
cudaError_t __wrap_cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  (void)s;
  *id = stream_id_now;
  return cudaSuccess;
}
static int events_made;
cudaError_t __wrap_cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned flags) {
  (void)flags;
  *ev = (cudaEvent_t)(uintptr_t)(0x1000 + ++events_made);
  return cudaSuccess;
}
static cudaEvent_t busy_event;
cudaError_t __wrap_cudaEventQuery(cudaEvent_t ev) { return ev == busy_event ? cudaErrorNotReady : cudaSuccess; }

/* A program destroys a stream whose last work still runs and gets its
 * handle back for a new one: the new stream's records must not move the
 * event that the old one's keepers (imports its copies used) wait for. */
START_TEST(reused_handle_gets_own_event) {
  cudaStream_t h = (cudaStream_t)(uintptr_t)0x5000;
  cudaEvent_t first, second, again, third;
  int made = events_made;
  stream_id_now = 7;
  ck_assert_int_eq(mpn_event_of_stream(h, 0, &first), ncclSuccess);
  busy_event = first;
  stream_id_now = 8;
  ck_assert_int_eq(mpn_event_of_stream(h, 0, &second), ncclSuccess);
  ck_assert_msg(second != first, "stream 8 got the event %p of stream 7 at the same handle, whose record still runs",
                (void*)first);
  ck_assert_int_eq(mpn_event_of_stream(h, 0, &again), ncclSuccess);
  ck_assert_ptr_eq(again, second); /* one stream, one event */
  /* Stream 7's record completed: its event serves the next new stream. */
  busy_event = second;
  stream_id_now = 9;
  ck_assert_int_eq(mpn_event_of_stream(h, 0, &third), ncclSuccess);
  ck_assert_ptr_eq(third, first);
  ck_assert_int_eq(events_made - made, 2);
  /* No record running: the handle's event stays. */
  busy_event = NULL;
  stream_id_now = 10;
  ck_assert_int_eq(mpn_event_of_stream(h, 0, &again), ncclSuccess);
  ck_assert_ptr_eq(again, first);
  ck_assert_int_eq(events_made - made, 2);
}
END_TEST

/* The lanes a fork makes and uses (src/cuda/lanes.c). */
static int lanes_made;
cudaError_t __wrap_cudaStreamGetPriority(cudaStream_t s, int* priority) {
  (void)s;
  *priority = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority) {
  (void)flags, (void)priority;
  *s = (cudaStream_t)(uintptr_t)(0x9000 + ++lanes_made);
  return cudaSuccess;
}
cudaError_t __wrap_cudaStreamDestroy(cudaStream_t s) {
  (void)s;
  lanes_made--;
  return cudaSuccess;
}
cudaError_t __wrap_cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  (void)ev, (void)s;
  return cudaSuccess;
}
cudaError_t __wrap_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned flags) {
  ck_assert_msg(s != NULL, "a lane's wait went to stream 0, the legacy default stream");
  (void)ev, (void)flags;
  return cudaSuccess;
}

/* CUDA's documentation promises a stream id unique for the life of the
 * program, not one other than 0: a caller's stream numbered 0 gets lanes of
 * its own, not an unused set's empty ones. */
START_TEST(stream_id_zero_gets_lanes) {
  mpn_lanes_t lanes;
  memset(&lanes, 0, sizeof(lanes));
  cudaStream_t origin = (cudaStream_t)(uintptr_t)0x6000, on[MPN_LANES + 1];
  stream_id_now = 0;
  lanes_made = 0;
  mpn_fork_t f;
  mpn_fork_init(&f, origin, 0, &lanes);
  for (int k = 0; k <= MPN_LANES; k++) ck_assert_int_eq(mpn_fork_next(&f, &on[k]), ncclSuccess);
  ck_assert_ptr_eq(on[0], origin);
  for (int k = 1; k <= MPN_LANES; k++)
    ck_assert_msg(on[k] != NULL && on[k] != origin, "copy %d of stream id 0 went to stream %p", k, (void*)on[k]);
  ck_assert_int_eq(lanes_made, MPN_LANES);
  ck_assert_int_eq(mpn_fork_join(&f), ncclSuccess);
  mpn_lanes_destroy(&lanes);
  ck_assert_int_eq(lanes_made, 0);
}
END_TEST

int main(void) {
  Suite* s = suite_create("cuda_paths");
  /* One case per file of src/cuda. */
  const struct {
    const char* name;
    const TTest* test;
  } cases[] = {{"sync_grid", grid_pool_failure_frees_host_words},
               {"device", not_capturing_keeps_program_error},
               {"event", reused_handle_gets_own_event},
               {"lanes", stream_id_zero_gets_lanes}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    TCase* tc = tcase_create(cases[i].name);
    tcase_add_test(tc, cases[i].test);
    suite_add_tcase(s, tc);
  }
  return unit_suite_run(s);
}
