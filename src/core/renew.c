/*
 * renew.c - a device's process-wide state after cudaDeviceReset (renew.h):
 * each device's context id is recorded when the library first uses it, and
 * a communicator's creation that finds another id forgets the state of
 * every layer for that device.
 */
#include "core/renew.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/comm.h"
#include "core/debug.h"
#include "core/error.h"
#include "cuda/device.h"
#include "cuda/event.h"
#include "cuda/ipc.h"
#include "cuda/memory.h"
#include "cuda/service.h"
#include "cuda/sync.h"
#include "p2p/pair.h"
#include "p2p/stage.h"

#define RENEW_DEVICES 64

static unsigned long long known[RENEW_DEVICES]; /* dev's context id when last seen; 0: not yet */
static pthread_mutex_t renew_lock = PTHREAD_MUTEX_INITIALIZER;

/* The communicators on dev made before the reset can do nothing more. */
static void fail_survivors(int dev) {
  struct ncclComm** comms = NULL;
  int n = mpn_comm_hold_live(&comms), failed = 0;
  for (int i = 0; i < n; i++) {
    struct ncclComm* comm = comms[i];
    if (comm->cuda_dev == dev && __atomic_load_n(&comm->state, __ATOMIC_ACQUIRE) == MPN_COMM_READY) {
      __atomic_store_n(&comm->device_gone, 1, __ATOMIC_RELEASE);
      mpn_comm_set_broken(comm, ncclInvalidUsage,
                          "device %d was reset (cudaDeviceReset) while comm %p lived: its streams, memory and "
                          "mappings are gone; destroy or abort it",
                          dev, (void*)comm);
      failed++;
    }
    mpn_comm_release(comm);
  }
  free(comms);
  if (failed) MPN_WARN("device %d was reset while %d communicator(s) on it lived: they are failed", dev, failed);
}

int mpn_device_renew(int dev) {
  if (dev < 0 || dev >= RENEW_DEVICES) return 0;
  unsigned long long id = mpn_cuda_context_id();
  if (id == 0) return 0; /* (CUDA cannot tell: the state is kept as it is) */
  pthread_mutex_lock(&renew_lock);
  unsigned long long was = known[dev];
  known[dev] = id;
  int reset = was != 0 && was != id;
  if (reset) {
    /* Under the lock: a thread creating another communicator on dev waits
     * here until the old state is gone. */
    MPN_INFO(MPN_SUBSYS_INIT, "device %d was reset since the library last used it: its process-wide state is made anew",
             dev);
    mpn_cuda_service_forget(dev);
    mpn_event_forget(dev);
    mpn_sync_grid_forget(dev);
    mpn_stage_forget(dev);
    mpn_ipc_forget_device(dev);
    mpn_pair_forget_device(dev);
    mpn_mem_forget(dev, id);
    fail_survivors(dev);
  }
  pthread_mutex_unlock(&renew_lock);
  return reset;
}
