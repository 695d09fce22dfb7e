/*
 * ipc_model.h - the model of the CUDA driver that test_ipc_cache and
 * test_ipc_closer link in place of the calls src/cuda/ipc.c makes (--wrap,
 * in ipc_model.c), and the helpers both use to import and count.
 */
#ifndef MPN_TESTS_UNIT_IPC_MODEL_H_
#define MPN_TESTS_UNIT_IPC_MODEL_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/ipc.h"

/** The exporting process of the tests' imports. */
static const uint64_t owner = 0x1234;
/** Where owner's buffers lie by default, and their default size. */
static const uint64_t base = 0x7f0000000000ull, size = 2 << 20;

/** Events: done[k] says whether event k completed. */
extern int done[16];
/** Event k, as the cache records it for a stream's copies. */
cudaEvent_t event(int k);

/** Closes the model's driver has made (the closing thread's included). */
extern int closes;
/** While set, closes wait (the device's work waits for a peer). */
extern int closes_held;

/** This process's allocation, for exports: one live buffer id per base;
 *  alloc_pooled: the driver says it is a memory pool's. */
extern uint64_t alloc_base, alloc_size, alloc_id;
extern int alloc_pooled;

/** The address the model's mapping i is opened at (mappings are numbered
 *  in the order they were first opened). */
char* mapping_ptr(int i);

/** Forgets every mapping: the model's device was reset. */
void ipc_model_reset_device(void);

/** A buffer of owner: buffer id, the allocation at base, a handle of its
 *  own (or, with handle_of, the handle of buffer handle_of: the driver
 *  recycled it). */
mpn_ipc_desc_t owner_buffer(uint64_t id, uint64_t bytes, uint64_t handle_of);

/** A buffer of owner at [at, at + bytes) whose handle (handle_of) the
 *  model maps once by range. */
mpn_ipc_desc_t owner_range(uint64_t id, uint64_t at, uint64_t bytes, uint64_t handle_of);

/** Imports d of owner, which must work, and reports its use by the
 *  stream whose copies end with event used. */
void import_once(const mpn_ipc_desc_t* d, cudaEvent_t used);

/** Closes made, once the closing thread has closed what it was handed. */
int closed(void);

/** The imports and the exports the caches hold. */
int imports(void);
int exports(void);

/** Opens left, once the closing thread has closed what it was handed. */
int open_count(void);

/** Asserts the imports cached, closes made and opens left once the
 *  closing thread has closed what it was handed. */
void expect_counts(int n_imports, int n_closed, int n_open);

#endif /* MPN_TESTS_UNIT_IPC_MODEL_H_ */
