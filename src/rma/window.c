/*
 * window.c - ncclCommWindowRegister / Deregister / ncclWinGetUserPtr.
 * Registration is collective: every rank checks its arguments and
 * describes its buffer (a CUDA IPC handle of its allocation for peers in
 * other processes), the descriptions are allgathered, and all ranks fail
 * together, each naming the rank that refused, or all succeed.  A rank
 * whose own arguments are wrong joins the allgather too: NCCL's would
 * leave its peers waiting, and the communicator's later collectives would
 * pair up wrongly.  Deregistration agrees the same way.  Peers' buffers are
 * mapped on first put.  A window holds this rank's ncclMemAlloc memory
 * (cuda/memory.h) from registration until it is let go: an ncclMemFree
 * meanwhile waits for that.
 */
#include "rma/window.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/bootstrap.h"
#include "bootstrap/channel.h"
#include "core/api.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/turn.h"
#include "core/group.h"
#include "rma/winasync.h"
#include "rma/winshare.h"
#include "rma/wingroup.h"
#include "rma/rma.h"
#include "transport.h"
#ifdef HAVE_UCX
#include "ucx/net_comm.h"
#include "ucx/winstage.h"
#endif

ncclResult_t mpn_win_check(struct ncclComm* comm, ncclWindow_t win, const char* caller, const char* arg) {
  mpn_rma_t* rma = __atomic_load_n(&comm->rma, __ATOMIC_ACQUIRE);
  int found = 0;
  if (rma && win) {
    pthread_mutex_lock(&rma->lock);
    for (struct ncclWindow_vidmem* w = rma->windows; w && !found; w = w->next) found = w == win;
    pthread_mutex_unlock(&rma->lock);
  }
  if (found) return ncclSuccess;
  return MPN_REFUSE(comm, ncclInvalidArgument,
                    "%s: %s %p is not a window of comm %p (registered with another "
                    "communicator, deregistered, or never registered)",
                    caller, arg, (void*)win, (void*)comm);
}

/* This rank's part: the buffer checked and, if a peer is in another
 * process, described for CUDA IPC.  Errors are returned (and set). */
static ncclResult_t describe_part(struct ncclComm* comm, void* buff, size_t size,
                                  mpn_win_part_t* part) {
  const char* fn = "ncclCommWindowRegister";
  memset(part, 0, sizeof(*part));
  part->proc = mpn_chan_proc_id();
  part->ptr = (uint64_t)(uintptr_t)buff;
  part->size = size;
  if (comm->cuda_dev < 0)
    return MPN_REFUSE(comm, ncclInvalidUsage, "%s: comm %p has no CUDA device", fn, (void*)comm);
  int pool = 0;
  ncclResult_t res = mpn_ipc_export(buff, "buff", &part->ipc, &pool);
  if (res != ncclSuccess) {
    char why[256];
    snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
    return mpn_error_set(comm, res, "%s: %s", fn, why);
  }
  if (pool)
    return MPN_REFUSE(comm, ncclInvalidUsage,
                      "%s: buff %p comes from a memory pool (cudaMallocAsync) or CUDA's virtual memory "
                      "API (cuMemCreate), which other processes cannot map through CUDA IPC; use "
                      "ncclMemAlloc or cudaMalloc",
                      fn, buff);
  if (size > part->ipc.size - part->ipc.offset) /* export gives offset <= size */
    return MPN_REFUSE(comm, ncclInvalidArgument,
                      "%s: buff %p + size %zu runs past the end of its allocation (%llu bytes "
                      "from 0x%llx)",
                      fn, buff, size, (unsigned long long)part->ipc.size,
                      (unsigned long long)part->ipc.base);
  return ncclSuccess;
}

/* After the allgather: the first refusal of any rank, the same on all. */
static ncclResult_t check_parts(struct ncclComm* comm, const mpn_win_part_t* parts) {
  const char* fn = "ncclCommWindowRegister";
  for (int r = 0; r < comm->nranks; r++)
    if (parts[r].error != ncclSuccess && r != comm->rank)
      return MPN_REFUSE(comm, (ncclResult_t)parts[r].error,
                        "%s: rank %d could not register its buffer (%s); no window was made", fn,
                        r, ncclGetErrorString((ncclResult_t)parts[r].error));
  for (int r = 1; r < comm->nranks; r++)
    if (parts[r].flags != parts[0].flags)
      return MPN_REFUSE(comm, ncclInvalidArgument,
                        "%s: winFlags must be the same on every rank: rank 0 passes 0x%x, rank %d "
                        "0x%x; no window was made",
                        fn, parts[0].flags, r, parts[r].flags);
  if (parts[0].flags & NCCL_WIN_COLL_SYMMETRIC)
    for (int r = 1; r < comm->nranks; r++)
      if (parts[r].size != parts[0].size)
        return MPN_REFUSE(comm, ncclInvalidArgument,
                          "%s: NCCL_WIN_COLL_SYMMETRIC needs one size on every rank: rank 0 "
                          "registers %llu bytes, rank %d %llu",
                          fn, (unsigned long long)parts[0].size, r,
                          (unsigned long long)parts[r].size);
  return ncclSuccess;
}

/* Whether this process maps peer's part of w over CUDA IPC for its puts. */
static int peer_mapped(const struct ncclComm* comm, const struct ncclWindow_vidmem* w, int peer) {
  return comm->cuda_dev >= 0 && w->parts[peer].proc != mpn_chan_proc_id() && comm->transport[peer] != MPN_TRANSPORT_UCX;
}

/* Counts w among the live windows naming each peer allocation it may map
 * (rma/winshare.h), for all peers or none. */
static void share_peers(struct ncclComm* comm, struct ncclWindow_vidmem* w) {
  int peer = 0;
  while (peer < comm->nranks && (!peer_mapped(comm, w, peer) ||
                                 mpn_win_share_take(w->parts[peer].proc, w->parts[peer].ipc.buffer_id, comm->cuda_dev)))
    peer++;
  w->shared = peer == comm->nranks;
  if (w->shared) return;
  MPN_INFO(MPN_SUBSYS_RMA,
           "rank %d: window %p not counted among the users of its peers' memory (out of memory): its "
           "deregistration closes only imports that no counted window names",
           comm->rank, (void*)w);
  while (peer-- > 0)
    if (peer_mapped(comm, w, peer))
      mpn_win_share_drop(w->parts[peer].proc, w->parts[peer].ipc.buffer_id, comm->cuda_dev, 1);
}

/* Closes, once the puts issued into them completed, the peers' buffers this
 * rank mapped for its puts and no other live window of the process names:
 * kept open, a freed window's mapping holds the owner's memory and may
 * stand in the way of its next one. */
static void forget_peers(struct ncclComm* comm, const struct ncclWindow_vidmem* w) {
  for (int peer = 0; peer < comm->nranks; peer++)
    if (peer_mapped(comm, w, peer))
      mpn_win_share_drop(w->parts[peer].proc, w->parts[peer].ipc.buffer_id, comm->cuda_dev, w->shared);
}

/* This rank's own arguments (win checked by the caller). */
static ncclResult_t check_args(ncclComm_t comm, void* buff, size_t size, int winFlags) {
  const char* fn = "ncclCommWindowRegister";
  if (buff == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: buff is NULL", fn);
  if (size == 0) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: size is 0", fn);
  if (winFlags & ~(NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING))
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: winFlags 0x%x has unknown bits", fn, winFlags);
  if ((uintptr_t)buff % NCCL_WIN_REQUIRED_ALIGNMENT)
    return MPN_REFUSE(comm, ncclInvalidArgument, "%s: buff %p is not aligned to NCCL_WIN_REQUIRED_ALIGNMENT (%d bytes)",
                      fn, buff, NCCL_WIN_REQUIRED_ALIGNMENT);
  return ncclSuccess;
}

static ncclResult_t win_register(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags,
                                 ncclResult_t forced);

/* A window call's way out: its turn ends (the next call of comm goes on),
 * then comm is let go of. */
static void win_call_leave(struct ncclComm* comm, mpn_turn_t* turn) {
  mpn_turn_end(turn);
  mpn_comm_release(comm);
}

/* A window call's way in, once comm was checked (by the caller: registration
 * clears its output between the check and the hold).  comm is held for the
 * collective: an abort or destroy of another thread (the way out of a hung
 * allgather) frees comm only once the call let go of it; unheld, the
 * allgather read the freed communicator.  Then the call waits for its turn
 * (taken now where *turn is NULL, in own) among comm's collectives over its
 * bootstrap, in call order (core/turn.h): a non-blocking split issued before
 * runs its own first.  On failure nothing is held: a failed wait was left. */
static ncclResult_t win_call_enter(struct ncclComm* comm, mpn_turn_t** turn, mpn_turn_t* own, const char* fn) {
  MPN_CHECK(mpn_comm_hold_for(comm, fn));
  if (*turn == NULL) {
    *own = (mpn_turn_t){0};
    mpn_turn_take(&comm->split_order, own);
    *turn = own;
  }
  ncclResult_t res = mpn_turn_wait(*turn, &comm->abort_flag, fn);
  if (res != ncclSuccess) win_call_leave(comm, *turn);
  return res;
}

ncclResult_t mpn_win_register(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags,
                              ncclResult_t forced, mpn_turn_t* turn) {
  const char* fn = "ncclCommWindowRegister";
  if (win) *win = NULL; /* on every failure, the comm's own too (RMA.md) */
  MPN_CHECK(mpn_comm_check(comm, fn, 1));
  mpn_turn_t own;
  ncclResult_t res = win_call_enter(comm, &turn, &own, fn);
  if (res != ncclSuccess) return res;
  res = win_register(comm, buff, size, win, winFlags, forced);
  win_call_leave(comm, turn);
  return res;
}

static ncclResult_t win_register(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags,
                                 ncclResult_t forced) {
  const char* fn = "ncclCommWindowRegister";
  mpn_win_part_t* parts = calloc((size_t)comm->nranks, sizeof(*parts));
  if (parts == NULL)
    return mpn_bootstrap_fail(comm->bootstrap, mpn_error_set(comm, ncclSystemError, "%s: out of memory", fn));
  struct ncclWindow_vidmem* w = calloc(1, sizeof(*w));
  mpn_rma_t* rma = NULL;
  mpn_mem_alloc_t* pin = NULL;
  ncclResult_t mine = forced != ncclSuccess ? forced
                      : win                 ? check_args(comm, buff, size, winFlags)
                                            : MPN_REFUSE(comm, ncclInvalidArgument, "%s: win is NULL", fn);
  if (mine == ncclSuccess) mine = mpn_rma_state(comm, &rma);
  if (mine == ncclSuccess && w == NULL) mine = mpn_error_set(comm, ncclSystemError, "%s: out of memory", fn);
  /* Memory ncclMemFree freed (deferred) is refused like any bad part;
   * held before it is described, so that no free comes in between. */
  if (mine == ncclSuccess) mine = mpn_mem_pin(comm, fn, buff, &pin);
  if (mine == ncclSuccess) mine = describe_part(comm, buff, size, &parts[comm->rank]);
  parts[comm->rank].error = mine;
  parts[comm->rank].flags = winFlags;
  ncclResult_t res = mpn_bootstrap_allgather(comm->bootstrap, parts, sizeof(*parts));
  /* Past a refusal every rank saw, no peer has a window over this part and
   * the hold may go; past any other failure (the allgather cut short, UCX's
   * step failing here only) a peer may have one and put into it: the
   * memory is then held for good, as an abort's pairs are.  Not where this
   * rank refused its own part: a peer that got it refuses it too, so the
   * hold goes even when the allgather was cut short (kept, an ncclMemFree
   * of the memory never freed it). */
  int held_for_good = res != ncclSuccess && mine == ncclSuccess;
  if (res == ncclSuccess) res = mine != ncclSuccess ? mine : check_parts(comm, parts);
  if (res != ncclSuccess) goto fail;
  held_for_good = 1;
  /* Numbered where every rank got this far (the same parts, so the same
   * verdict): the numbers then agree, whatever UCX does below. */
  pthread_mutex_lock(&rma->lock);
  uint64_t serial = ++rma->registered;
  pthread_mutex_unlock(&rma->lock);
  *w = (struct ncclWindow_vidmem){
      .comm = comm, .base = buff, .size = size, .flags = winFlags, .parts = parts, .serial = serial, .pin = pin};
#ifdef HAVE_UCX
  /* Collective too: every rank of a communicator with UCX peers mirrors its part. */
  if (mpn_ucx_comm_ready(comm)) res = mpn_ucx_win_register(comm, buff, size, &w->ucx);
  if (res != ncclSuccess) goto fail;
#endif
  share_peers(comm, w);
  pthread_mutex_lock(&rma->lock);
  w->next = rma->windows;
  rma->windows = w;
  pthread_mutex_unlock(&rma->lock);
  *win = w;
  MPN_INFO(MPN_SUBSYS_RMA, "rank %d: window %p of %zu bytes at %p", comm->rank, (void*)w, size, buff);
  return ncclSuccess;
fail:
  if (!held_for_good) mpn_mem_unpin(pin); /* an ncclMemFree meanwhile happens now */
  free(w), free(parts);
  return res;
}

MPN_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
        ncclWindow_t* win, int winFlags) {
  if (mpn_group_depth() > 0 || mpn_win_async_wanted(comm)) {
    mpn_win_job_t job = mpn_win_job_register(comm, buff, size, win, winFlags);
    return mpn_group_depth() > 0 ? mpn_win_defer(&job) : mpn_win_async(&job);
  }
  return mpn_win_register(comm, buff, size, win, winFlags, ncclSuccess, NULL);
}

/* Lets go of what w holds besides itself: its parts, and this rank's
 * memory, which a deferred ncclMemFree may free now.  A retired window
 * comes here twice (retired, then freed) and holds nothing the second time. */
static void win_let_go(struct ncclWindow_vidmem* w) {
  free(w->parts);
  w->parts = NULL;
  mpn_mem_unpin(w->pin);
  w->pin = NULL;
}

static void win_free(struct ncclWindow_vidmem* w) {
  if (w) win_let_go(w);
  free(w);
}

/* Keeps w itself (not what it holds) out of reuse for a while: a stale
 * handle is then refused by mpn_win_check, not taken for a newer window. */
static void win_retire(mpn_rma_t* rma, struct ncclWindow_vidmem* w) {
  win_let_go(w);
  w->next = NULL;
  unsigned k = rma->retired_next++ % MPN_WIN_RETIRED;
  win_free(rma->retired[k]);
  rma->retired[k] = w;
}

/* What a rank says about its deregistration (allgathered). */
typedef struct {
  int32_t result; /* ncclResult_t: its handle was refused, or its group failed */
  int32_t pad;
  uint64_t serial; /* the window's number (registration order) */
} dereg_t;

/* Whether every rank passes a valid handle, and of the same window (the
 * same registration): the same answer on all. */
static ncclResult_t agree_deregister(struct ncclComm* comm, ncclResult_t mine, ncclWindow_t win) {
  const char* fn = "ncclCommWindowDeregister";
  dereg_t* all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL)
    return mpn_bootstrap_fail(comm->bootstrap, mpn_error_set(comm, ncclSystemError, "%s: out of memory", fn));
  all[comm->rank] = (dereg_t){.result = mine, .serial = mine == ncclSuccess ? win->serial : 0};
  ncclResult_t res = mpn_bootstrap_allgather(comm->bootstrap, all, sizeof(*all));
  for (int r = 0; r < comm->nranks && res == ncclSuccess && mine == ncclSuccess; r++)
    if (all[r].result != ncclSuccess)
      res = MPN_REFUSE(comm, (ncclResult_t)all[r].result,
                       "%s: rank %d refused it (a handle that is no window of the communicator, or its group "
                       "failed); the window stays registered",
                       fn, r);
    else if (all[r].serial != win->serial)
      res = MPN_REFUSE(comm, ncclInvalidUsage,
                       "%s: rank %d deregisters the communicator's window number %llu, rank %d number %llu (in "
                       "registration order): every rank must pass the same window; both stay registered",
                       fn, r, (unsigned long long)all[r].serial, comm->rank, (unsigned long long)win->serial);
  free(all);
  return res != ncclSuccess ? res : mine;
}

MPN_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  /* As NCCL's: a NULL window (a program's cleanup after a registration that
   * failed, say) is nothing to deregister, at once and with no collective,
   * in a group too.  Only the handle is checked, as NCCL checks it, not the
   * communicator's state: one still being created (non-blocking), whose
   * window calls are queued until it is made, must not refuse it and fail
   * the caller's group, nor one finalized or failed, which has nothing to
   * do for it either. */
  if (win == NULL) return mpn_group_fail(mpn_comm_check(comm, "ncclCommWindowDeregister", MPN_COMM_NEED_LIVE));
  if (mpn_group_depth() > 0 || mpn_win_async_wanted(comm)) {
    mpn_win_job_t job = mpn_win_job_deregister(comm, win);
    return mpn_group_depth() > 0 ? mpn_win_defer(&job) : mpn_win_async(&job);
  }
  return mpn_win_deregister(comm, win, ncclSuccess, NULL);
}

static ncclResult_t win_deregister(ncclComm_t comm, ncclWindow_t win, ncclResult_t forced);

ncclResult_t mpn_win_deregister(ncclComm_t comm, ncclWindow_t win, ncclResult_t forced, mpn_turn_t* turn) {
  const char* fn = "ncclCommWindowDeregister";
  MPN_CHECK(mpn_comm_check(comm, fn, 1));
  mpn_turn_t own;
  ncclResult_t res = win_call_enter(comm, &turn, &own, fn);
  if (res != ncclSuccess) return res;
  res = win_deregister(comm, win, forced);
  win_call_leave(comm, turn);
  return res;
}

static ncclResult_t win_deregister(ncclComm_t comm, ncclWindow_t win, ncclResult_t forced) {
  const char* fn = "ncclCommWindowDeregister";
  MPN_CHECK(agree_deregister(comm, forced != ncclSuccess ? forced : mpn_win_check(comm, win, fn, "win"), win));
  mpn_rma_t* rma = comm->rma;
  pthread_mutex_lock(&rma->lock);
  for (struct ncclWindow_vidmem** p = &rma->windows; *p; p = &(*p)->next)
    if (*p == win) {
      *p = win->next;
      break;
    }
  pthread_mutex_unlock(&rma->lock);
  forget_peers(comm, win);
  ncclResult_t res = ncclSuccess;
#ifdef HAVE_UCX
  if (win->ucx) res = mpn_ucx_win_deregister(comm, win->ucx); /* collective */
#endif
  /* Collective, as in NCCL: no rank leaves while another may still name it. */
  ncclResult_t barrier = mpn_bootstrap_barrier(comm->bootstrap);
  /* After the barrier, where every peer has let go of the window: a
   * deferred ncclMemFree then frees the memory when a program's own
   * ncclMemFree after this call would.  A failed barrier (an abort, a peer
   * gone) tells nothing of the peers: the memory is then held for good,
   * and no cudaFree waits here for work that may wait for them. */
  if (barrier != ncclSuccess) win->pin = NULL;
  win_retire(rma, win);
  return res != ncclSuccess ? res : barrier;
}

MPN_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  const char* fn = "ncclWinGetUserPtr";
  MPN_CHECK(mpn_comm_check(comm, fn, MPN_COMM_NEED_QUERY));
  if (outUserPtr == NULL) return MPN_REFUSE(comm, ncclInvalidArgument, "%s: outUserPtr is NULL", fn);
  MPN_CHECK(mpn_win_check(comm, win, fn, "win"));
  *outUserPtr = win->base;
  return ncclSuccess;
}

ncclResult_t mpn_win_peer_base(ncclWindow_t win, int peer, void** out, mpn_ipc_ref_t* ref,
                              int* imported) {
  const mpn_win_part_t* part = &win->parts[peer];
  *imported = part->proc != mpn_chan_proc_id();
  if (!*imported) {
    *out = (void*)(uintptr_t)part->ptr;
    return ncclSuccess;
  }
  /* Cached per allocation: the first put to a peer pays the mapping. */
  return mpn_ipc_import(part->proc, &part->ipc, out, ref);
}

void mpn_win_free_all(struct ncclComm* comm, int abandon) {
  mpn_rma_t* rma = comm->rma;
  if (rma == NULL) return;
  while (rma->windows) {
    struct ncclWindow_vidmem* w = rma->windows;
    rma->windows = w->next;
#ifdef HAVE_UCX
    if (w->ucx) mpn_ucx_win_retire(comm, w->ucx); /* freed once the proxy let go of comm */
#endif
    forget_peers(comm, w);
    if (abandon) w->pin = NULL; /* held for good (window.h) */
    win_free(w);
  }
  for (int k = 0; k < MPN_WIN_RETIRED; k++) {
    win_free(rma->retired[k]);
    rma->retired[k] = NULL;
  }
}
