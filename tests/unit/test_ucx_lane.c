/*
 * test_ucx_lane.c - the first message of a UCX lane (src/ucx/staged.c):
 * ncclGroupEnd's checks make the lane (its stream, pinned slots and words)
 * on the communicator's device, and must leave the calling thread's
 * current device as it was, as NCCL's ncclGroupEnd does (a thread driving
 * ranks on several devices, or working on another device, otherwise found
 * its next cudaMalloc on the communicator's device).
 * The CUDA calls of a lane's making are stand-ins (--wrap) over a model of
 * the thread's current device; the communicator's UCX peer is one too.
 */
#include <check.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/enqueue.h"
#include "ucx/net_comm.h"
#include "ucx/proxy.h"
#include "ucx/staged.h"
#include "run_suite.h"

static int current = 0; /* the model's current device */
static mpn_ucx_peer_t the_peer;
static int comm_error;

cudaError_t __wrap_cudaGetDevice(int* dev) {
  *dev = current;
  return cudaSuccess;
}
cudaError_t __wrap_cudaSetDevice(int dev) {
  current = dev;
  return cudaSuccess;
}
cudaError_t __wrap_cudaGetLastError(void) { return cudaSuccess; }
cudaError_t __wrap_cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  (void)flags;
  *s = (cudaStream_t)0x100;
  return cudaSuccess;
}
cudaError_t __wrap_cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  (void)flags;
  *e = (cudaEvent_t)0x200;
  return cudaSuccess;
}
/* The stand-ins' host memory, freed by the test at its end: the lanes'
 * end (mpn_ucx_staged_free) leaves the buffers of a communicator that did
 * not end cleanly to UCX. */
#define HELD_MAX 16
static void* held[HELD_MAX];

static void* held_alloc(size_t bytes) {
  for (int i = 0; i < HELD_MAX; i++)
    if (held[i] == NULL) return held[i] = calloc(1, bytes);
  return NULL;
}
static void held_free_all(void) {
  for (int i = 0; i < HELD_MAX; i++) {
    free(held[i]);
    held[i] = NULL;
  }
}
cudaError_t __wrap_cudaHostAlloc(void** p, size_t bytes, unsigned flags) {
  (void)flags;
  *p = held_alloc(bytes);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t __wrap_mpn_cuda_host_mapped(size_t bytes, void** host, CUdeviceptr* dev) {
  *host = held_alloc(bytes);
  *dev = (CUdeviceptr)(uintptr_t)*host;
  return *host ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t __wrap_cudaFreeHost(void* p) {
  for (int i = 0; i < HELD_MAX; i++)
    if (held[i] == p) {
      free(p);
      held[i] = NULL;
    }
  return cudaSuccess;
}
cudaError_t __wrap_cudaStreamDestroy(cudaStream_t s) {
  (void)s; /* (the stand-in's handle) */
  return cudaSuccess;
}
cudaError_t __wrap_cudaEventDestroy(cudaEvent_t e) {
  (void)e;
  return cudaSuccess;
}
cudaError_t __wrap_cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* p) {
  (void)a, (void)p;
  return cudaErrorInvalidValue; /* (not memory CUDA knows: staged) */
}
mpn_ucx_peer_t* __wrap_mpn_ucx_comm_peer(struct ncclComm* comm, int peer) {
  (void)comm, (void)peer;
  return &the_peer;
}
int* __wrap_mpn_ucx_comm_error(struct ncclComm* comm) {
  (void)comm;
  return &comm_error;
}

/* A send of rank 0 on device 1 to rank 1 over UCX, checked while the
 * thread's current device is 0. */
static void check_first_message(mpn_op_kind_t kind) {
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  ck_assert_ptr_nonnull(comm);
  comm->rank = 0;
  comm->nranks = 2;
  comm->cuda_dev = 1;
  char buf[8] = {0};
  mpn_op_t op = {.kind = kind, .comm = comm, .buf = buf, .count = 8, .dtype = ncclInt8, .bytes = 8, .peer = 1};
  current = 0;
  ck_assert_int_eq(mpn_ucx_staged_check(&op), ncclSuccess);
  ck_assert_int_eq(current, 0); /* the caller's device, not the communicator's */
  current = 0;
  ck_assert_int_eq(mpn_ucx_staged_check(&op), ncclSuccess); /* (the lane is made: nothing to do) */
  ck_assert_int_eq(current, 0);
  mpn_ucx_staged_free(comm);
  held_free_all();
  free(comm);
}

START_TEST(send_lane_keeps_device) { check_first_message(MPN_OP_SEND); }
END_TEST

START_TEST(recv_lane_keeps_device) { check_first_message(MPN_OP_RECV); }
END_TEST

int main(void) {
  Suite* s = suite_create("ucx_lane");
  TCase* tc = tcase_create("first_message");
  tcase_add_test(tc, send_lane_keeps_device);
  tcase_add_test(tc, recv_lane_keeps_device);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
