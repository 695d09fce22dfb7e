/*
 * abort_drain.c - the end of an abort's release (p2p.h, mpn_p2p_abort): a
 * captured wait puts the flag it waited for back to 0, so one release lets
 * each queued replay of a graph through once, and the next replay waits
 * again.  So the release is repeated until the device has run what was
 * queued, before anything the streams may use is freed.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/proc.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/param.h"
#include "cuda/device.h"
#include "p2p/p2p.h"

/* A thread's wait for the device to be idle, shared with the thread that
 * waits for it: whichever lets go last frees it (the waiter may give up). */
typedef struct {
  int dev;
  int done; /* atomic: the device was idle */
  int refs; /* atomic */
} idle_wait_t;

static void idle_wait_put(idle_wait_t* w) {
  if (__atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) == 0) free(w);
}

static void* idle_wait_main(void* arg) {
  idle_wait_t* w = arg;
  /* Relaxed: a capture of another thread in global mode would refuse the
   * synchronize (and could be spoiled by it). */
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  cudaError_t err = cudaSetDevice(w->dev);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
  mpn_cuda_forget(err);
  mpn_cuda_relaxed_leave(mode);
  idle_wait_put(w);
  return NULL;
}

int mpn_p2p_abort_drain(struct ncclComm* comm, void (*release_more)(struct ncclComm*)) {
  long long limit_ms = mpn_param_int(MPN_PARAM_ABORT_DRAIN);
  if ((comm->p2p == NULL && release_more == NULL) || comm->cuda_dev < 0 || limit_ms == 0) return 1;
  idle_wait_t* w = calloc(1, sizeof(*w));
  if (w == NULL) return 1; /* (as before: one release, then the frees) */
  *w = (idle_wait_t){.dev = comm->cuda_dev, .refs = 2};
  int err = mpn_proc_thread_detached(idle_wait_main, w);
  if (err != 0) {
    free(w);
    return 1;
  }
  uint64_t deadline = mpn_clock_now_ns() + (uint64_t)limit_ms * 1000000ull;
  unsigned rounds = 0;
  while (!__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) && mpn_clock_now_ns() < deadline) {
    for (int peer = 0; comm->p2p && peer < comm->nranks; peer++) mpn_p2p_release_peer(comm, peer);
    if (release_more) release_more(comm);
    rounds++;
    usleep(500);
  }
  int idle = __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
  idle_wait_put(w);
  if (idle)
    MPN_INFO(MPN_SUBSYS_P2P, "rank %d: device idle after the abort's release (%u more releases)", comm->rank, rounds);
  else
    MPN_WARN(
        "rank %d: the device still had work queued %lld ms after ncclCommAbort released its flags "
        "(MPINCCL_ABORT_DRAIN_MS): the pairs' memory is left mapped, not freed, as freeing it would wait",
        comm->rank, limit_ms);
  return idle;
}
