/*
 * ipc_closer.h - closes CUDA IPC imports on a thread of its own.  The
 * driver's close waits for all of the process's device work, on one GPU as
 * on two (bench/ipc_close.cu); that work may wait for peers that wait for
 * this process's host, so no thread that enqueues may close.
 */
#ifndef MPN_CUDA_IPC_CLOSER_H_
#define MPN_CUDA_IPC_CLOSER_H_

#include <cuda_runtime.h>
#include <stdint.h>

/** Whether ranges [a, a + a_size) and [b, b + b_size) of one address space overlap. */
static inline int mpn_ipc_ranges_overlap(uint64_t a, uint64_t a_size, uint64_t b, uint64_t b_size) {
  return a < b + b_size && b < a + a_size;
}

/** One open of an import to close, and what it maps (for waits). */
typedef struct {
  void* mapping;             /**< what cudaIpcOpenMemHandle returned */
  int dev;                   /**< the device whose context opened it */
  uint64_t owner;            /**< the exporting process */
  uint64_t base, size;       /**< the range it maps, in the owner's address space */
  cudaIpcMemHandle_t handle; /**< the handle it was opened with */
  int skip;                  /**< not to be closed: its context is gone (mpn_ipc_closer_forget) */
} mpn_ipc_closing_t;

/**
 * Hands one open of an import to the closing thread (started on first
 * use) and returns at once.  When no thread can be started, closes it here
 * (logged).  After mpn_ipc_closer_stop, neither: the import is left to the
 * process's end, which unmaps it (nothing is queued that no thread serves).
 */
void mpn_ipc_closer_push(const mpn_ipc_closing_t* c);

/**
 * Waits until no close of owner's imports on device dev that overlaps
 * [base, base + size) of the owner's addresses, or was opened with handle,
 * is queued or running, or for at most timeout_ms; 1 when none is left.
 */
int mpn_ipc_closer_wait(uint64_t owner, int dev, uint64_t base, uint64_t size, const cudaIpcMemHandle_t* handle,
                        int64_t timeout_ms);

/**
 * A launch (ncclGroupEnd's enqueue of sends, receives and one-sided
 * operations) holds these around its CUDA calls: the closing thread starts
 * a close only between launches, and only once the process is quiet (see
 * mpn_ipc_closer_set_quiet), so that the close waits for no work of the
 * library's that waits for a peer, and no launch adds such work while it
 * runs.  A close that runs for long waits for work of the application's,
 * which may wait for this host to pass the launch: begin waits only until
 * the close has run 20 ms (at once past that), then returns 0 and the
 * launch goes on beside it; no close starts from the moment a launch waits
 * until it gets the gate or ends.  Returns 1 with the gate held; end gets
 * what begin returned.
 */
int mpn_ipc_closer_launch_begin(void);
void mpn_ipc_closer_launch_end(int gated);

/**
 * How the closing thread tells that the process is quiet: quiet returns 1
 * when no work of the library's launches is left on the GPU.  Until it is
 * set, and while a thread waits in mpn_ipc_closer_wait, closes start at
 * once.
 */
void mpn_ipc_closer_set_quiet(int (*quiet)(void));

/** Closes queued or running (for tests and statistics). */
int mpn_ipc_closer_pending(void);

/** Waits until every close handed over is done (tests). */
void mpn_ipc_closer_drain(void);

/**
 * Waits at most timeout_ms for every close handed over to be done, closes
 * starting at once (as for mpn_ipc_closer_wait); returns whether they are.
 * For the end of the process's last communicator: a program may reset the
 * device next, which must not meet a close of this thread under way.
 */
int mpn_ipc_closer_drain_for(int64_t timeout_ms);

/**
 * Drops the queued closes of device dev's imports, and waits for one of
 * them that is running: the program reset the device (core/renew.h), so
 * they went with the context, and their addresses may be mapped anew.
 */
void mpn_ipc_closer_forget(int dev);

/**
 * Starts no more closes, for good (done at the start of the process's exit,
 * before CUDA's teardown), and waits at most timeout_ms for one under way;
 * returns whether none runs (0 where this process runs no closing thread).
 * Where none runs, the thread ends (closes still queued stay so) and is
 * joined within the same timeout_ms.  Closes handed over after it are not
 * queued (mpn_ipc_closer_push).
 */
int mpn_ipc_closer_stop(int64_t timeout_ms);

#endif /* MPN_CUDA_IPC_CLOSER_H_ */
