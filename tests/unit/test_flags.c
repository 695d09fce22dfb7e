/*
 * test_flags.c - the flag operations of captured messages on the host: how
 * the kinds of flagop.h become stream memory operations (src/cuda/memop.c,
 * against a stand-in for cuStreamBatchMemOp), the value a release writes
 * into graph flags against every wait a captured message makes, which
 * captured launches take their graph slots' inbox (src/p2p/eager.c), and
 * the flag kernel's fallback to memory operations (src/cuda/syncs.c).
 */
#include <check.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/enqueue.h"
#include "core/param.h"
#include "cuda/memop.h"
#include "cuda/syncs.h"
#include "p2p/eager.h"
#include "p2p/pair.h"
#include "p2p/plan.h"
#include "run_suite.h"

/* What the stand-in driver was given: the last batch, and every operation
 * so far with the number of its batch. */
static CUstreamBatchMemOpParams issued[MPN_MEMOPS_MAX];
static unsigned n_issued, batches;
enum { LOGGED_MAX = 64 };
static CUstreamBatchMemOpParams logged[LOGGED_MAX];
static unsigned logged_batch[LOGGED_MAX], n_logged;

static CUresult batch_stub(CUstream s, unsigned n, CUstreamBatchMemOpParams* ops, unsigned flags) {
  (void)s, (void)flags;
  memcpy(issued, ops, n * sizeof(*ops));
  n_issued = n;
  for (unsigned i = 0; i < n && n_logged < LOGGED_MAX; i++, n_logged++) {
    logged[n_logged] = ops[i];
    logged_batch[n_logged] = batches;
  }
  batches++;
  return CUDA_SUCCESS;
}

START_TEST(memop_kinds) {
  mpn_driver_t drv;
  memset(&drv, 0, sizeof(drv));
  drv.stream_batch_mem_op = batch_stub;
  mpn_memops_t b;
  mpn_memops_init(&b, &drv, NULL);
  ck_assert_int_eq(mpn_memops_add(&b, 0x1000, MPN_PAIR_GRAPH_FREE, MPN_MEMOP_WAIT_NOR), ncclSuccess);
  ck_assert_int_eq(mpn_memops_add(&b, 0x2000, 1, MPN_MEMOP_WAIT_GEQ_CLEAR), ncclSuccess);
  ck_assert_int_eq(mpn_memops_add(&b, 0x3000, 7, MPN_MEMOP_WAIT_EQ), ncclSuccess);
  ck_assert_int_eq(mpn_memops_add(&b, 0x4000, 1, MPN_MEMOP_WRITE), ncclSuccess);
  ck_assert_int_eq(mpn_memops_flush(&b), ncclSuccess);
  ck_assert_uint_eq(batches, 1);
  ck_assert_uint_eq(n_issued, 5); /* the clearing wait is a wait and a write */
  ck_assert_int_eq(issued[0].operation, CU_STREAM_MEM_OP_WAIT_VALUE_64);
  ck_assert_uint_eq(issued[0].waitValue.flags, CU_STREAM_WAIT_VALUE_NOR);
  ck_assert_uint_eq(issued[0].waitValue.value64, ~(uint64_t)1);
  ck_assert_uint_eq(issued[1].waitValue.flags, CU_STREAM_WAIT_VALUE_GEQ);
  ck_assert_uint_eq(issued[1].waitValue.address, 0x2000);
  ck_assert_uint_eq(issued[1].waitValue.value64, 1);
  ck_assert_int_eq(issued[2].operation, CU_STREAM_MEM_OP_WRITE_VALUE_64);
  ck_assert_uint_eq(issued[2].writeValue.address, 0x2000);
  ck_assert_uint_eq(issued[2].writeValue.value64, 0);
  ck_assert_uint_eq(issued[3].waitValue.flags, CU_STREAM_WAIT_VALUE_EQ);
  ck_assert_int_eq(issued[4].operation, CU_STREAM_MEM_OP_WRITE_VALUE_64);
  ck_assert_uint_eq(issued[4].writeValue.value64, 1);
}
END_TEST

/* The conditions the driver and the flag kernel (src/cuda/sync.cu) apply. */
static int nor_passes(uint64_t flag, uint64_t value) { return ~(flag | value) != 0; }
static int geq_passes(uint64_t flag, uint64_t value) { /* the driver's 64-bit GEQ is cyclic, the kernel's not */
  return (int64_t)(flag - value) >= 0 && flag >= value;
}

START_TEST(release_value) {
  /* A graph slot's inbox: free (0) lets the sender in, full (1) holds it. */
  ck_assert(nor_passes(0, MPN_PAIR_GRAPH_FREE));
  ck_assert(!nor_passes(1, MPN_PAIR_GRAPH_FREE));
  ck_assert(!geq_passes(0, 1));
  ck_assert(geq_passes(1, 1));
  /* A release lets every captured wait go, on either side. */
  ck_assert(nor_passes(MPN_PAIR_GRAPH_RELEASED, MPN_PAIR_GRAPH_FREE));
  ck_assert(geq_passes(MPN_PAIR_GRAPH_RELEASED, 1));
  /* A flag written 1 over a release holds the sender again, so a release
   * lets each waiting replay go once (the watchdog repeats it). */
  ck_assert(!nor_passes(MPN_PAIR_GRAPH_RELEASED | 1, MPN_PAIR_GRAPH_FREE));
}
END_TEST

/* Plans on streams: streams[i] is the stream of plan i (0 or 1), -1 for a
 * plan that could not take the inbox anyway. */
static void by_launch(const int* streams, int n, const char* fewest, int* eager) {
  setenv("MPINCCL_EAGER_GRAPH", fewest, 1);
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  mpn_op_t ops[32];
  plan_t plans[32];
  memset(ops, 0, sizeof(ops));
  memset(plans, 0, sizeof(plans));
  for (int i = 0; i < n; i++) {
    ops[i].stream = (cudaStream_t)(uintptr_t)(0x100 + (streams[i] > 0 ? streams[i] : 0));
    plans[i].op = &ops[i];
    plans[i].eager_ok = streams[i] < 0 ? MPN_EAGER_NONE : MPN_EAGER_GRAPH;
  }
  mpn_eager_graph_by_launch(plans, n);
  for (int i = 0; i < n; i++) eager[i] = plans[i].eager_ok;
}

START_TEST(graph_inbox_by_count) {
  /* Stream 0 holds 8 such messages, stream 1 holds 7, interleaved, and a
   * message of stream 0 that takes no inbox counts for neither. */
  const int streams[] = {0, 1, 0, 1, -1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  int n = (int)(sizeof(streams) / sizeof(streams[0])), eager[32];
  by_launch(streams, n, "8", eager);
  for (int i = 0; i < n; i++) ck_assert_int_eq(eager[i], streams[i] == 0 ? MPN_EAGER_GRAPH : MPN_EAGER_NONE);
  by_launch(streams, n, "7", eager); /* both streams have enough */
  for (int i = 0; i < n; i++) ck_assert_int_eq(eager[i], streams[i] >= 0 ? MPN_EAGER_GRAPH : MPN_EAGER_NONE);
  by_launch(streams, n, "9", eager); /* neither */
  for (int i = 0; i < n; i++) ck_assert_int_eq(eager[i], MPN_EAGER_NONE);
  by_launch(streams, 2, "1", eager); /* 1: every such message */
  ck_assert_int_eq(eager[0], MPN_EAGER_GRAPH);
  ck_assert_int_eq(eager[1], MPN_EAGER_GRAPH);
}
END_TEST

/* A flag kernel that cannot be launched (here: no GPU) becomes the same work
 * as memory operations and copies (src/cuda/syncs.c).  A clearing wait
 * (a captured receive out of its graph slot's inbox) must clear only after
 * the round's copy: cleared before, the sender's next replay could write
 * the slot while this copy reads it.  Order expected: the wait alone, the
 * copy (which fails here, without a GPU), the clear, the round's write. */
START_TEST(fallback_clears_after_copies) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
    cudaGetLastError(); /* (with a GPU the kernel would launch, on made-up addresses) */
    return;
  }
  cudaGetLastError();
  mpn_driver_t drv;
  memset(&drv, 0, sizeof(drv));
  drv.stream_batch_mem_op = batch_stub;
  static char src[64], dst[64];
  mpn_sync_t k;
  mpn_sync_init(&k);
  ck_assert(mpn_sync_push(&k, 0, MPN_SYNC_WAIT, (mpn_sync_flag_t){0x2000, 1, MPN_MEMOP_WAIT_GEQ_CLEAR, 0}));
  ck_assert(mpn_sync_push_copy(&k, 0, (mpn_copy_t){src, dst, sizeof(src), NULL, NULL}));
  ck_assert(mpn_sync_push(&k, 0, MPN_SYNC_LAST, (mpn_sync_flag_t){0x4000, 1, MPN_MEMOP_WRITE, 0}));
  n_logged = batches = 0;
  ck_assert_int_ne(mpn_sync_issue(&drv, &k, NULL), ncclSuccess); /* the copy failed */
  ck_assert_uint_eq(n_logged, 3);
  ck_assert_int_eq(logged[0].operation, CU_STREAM_MEM_OP_WAIT_VALUE_64); /* the wait, without its clear */
  ck_assert_uint_eq(logged[0].waitValue.address, 0x2000);
  ck_assert_uint_eq(logged[0].waitValue.flags, CU_STREAM_WAIT_VALUE_GEQ);
  ck_assert_int_eq(logged[1].operation, CU_STREAM_MEM_OP_WRITE_VALUE_64); /* the clear, in a later batch */
  ck_assert_uint_eq(logged[1].writeValue.address, 0x2000);
  ck_assert_uint_eq(logged[1].writeValue.value64, 0);
  ck_assert_uint_gt(logged_batch[1], logged_batch[0]);
  ck_assert_uint_eq(logged[2].writeValue.address, 0x4000); /* then the round's write */
  ck_assert_uint_eq(logged[2].writeValue.value64, 1);
}
END_TEST

int main(void) {
  Suite* s = suite_create("flags");
  TCase* tc = tcase_create("flags");
  tcase_add_test(tc, memop_kinds);
  tcase_add_test(tc, release_value);
  tcase_add_test(tc, graph_inbox_by_count);
  tcase_add_test(tc, fallback_clears_after_copies);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
