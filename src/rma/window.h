/*
 * window.h - registered windows: every rank's buffer of one collective
 * registration, as each rank sees it (ncclWindow_t points to this).
 */
#ifndef MPN_RMA_WINDOW_H_
#define MPN_RMA_WINDOW_H_

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "cuda/ipc.h"
#include "cuda/memory.h"
#include "nccl.h"

struct ncclComm;

/** What a rank tells the others about its part of a window (allgathered). */
typedef struct {
  uint64_t proc;     /**< the owner's process */
  uint64_t ptr;      /**< the buffer in the owner's address space */
  uint64_t size;
  int32_t error;     /**< ncclResult_t: the owner could not register it */
  int32_t flags;     /**< the owner's winFlags: every rank must pass the same */
  mpn_ipc_desc_t ipc; /**< for peers in other processes */
} mpn_win_part_t;

struct ncclWindow_vidmem {
  struct ncclComm* comm;
  void* base;        /**< this rank's buffer (ncclWinGetUserPtr) */
  size_t size;
  int flags;
  mpn_win_part_t* parts; /**< nranks */
  struct mpn_ucx_win* ucx; /**< the host mirror UCX peers put into (ucx/winstage.c), or NULL */
  uint64_t serial;         /**< its registration's number on the communicator, the same on every rank */
  int shared;              /**< counted among the users of the peers' allocations it names (winshare.h) */
  mpn_mem_alloc_t* pin;    /**< the ncclMemAlloc allocation base lies in, held until the window goes
                                (its ncclMemFree waits for that), or NULL */
  struct ncclWindow_vidmem* next; /**< the communicator's live windows */
};

/**
 * Whether win is a live window of comm; otherwise ncclInvalidArgument with a
 * message naming caller, the argument (arg: "win", ncclPutSignal's
 * "peerWin") and the value.  Looks win up in comm's list without reading
 * through it, so a deregistered window is refused, not read.
 */
ncclResult_t mpn_win_check(struct ncclComm* comm, ncclWindow_t win, const char* caller, const char* arg);

/**
 * Address in this process of peer's part of win: a plain pointer within the
 * process, else an import through the IPC cache (*imported set; ref must be
 * marked used once the copies are issued, see mpn_ipc_mark_used).
 */
ncclResult_t mpn_win_peer_base(ncclWindow_t win, int peer, void** out, mpn_ipc_ref_t* ref,
                              int* imported);

/** ncclCommWindowRegister's collective work, done at once (outside a
 *  group, or at the end of one: wingroup.h).  forced: not ncclSuccess when
 *  this rank's group failed: it still joins the peers, which then fail too.
 *  turn: its turn among comm's bootstrap collectives (core/turn.h), taken
 *  at the call; NULL: taken now.  Ended (or given up) on return, but for
 *  a comm refused before its turn is waited for (mpn_comm_check, its
 *  hold): a caller that passed a turn then gives it up itself
 *  (wingroup.c, mpn_turn_pass). */
ncclResult_t mpn_win_register(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags,
                              ncclResult_t forced, mpn_turn_t* turn);

/** ncclCommWindowDeregister's collective work, done at once; forced as for
 *  mpn_win_register. */
ncclResult_t mpn_win_deregister(ncclComm_t comm, ncclWindow_t win, ncclResult_t forced, mpn_turn_t* turn);

/** Frees the windows a communicator still holds (at destruction; not
 *  collective).  abandon (an abort whose device work did not end): their
 *  hold on ncclMemAlloc memory stays, so that a deferred ncclMemFree does
 *  not free it now (cudaFree would wait for that work). */
void mpn_win_free_all(struct ncclComm* comm, int abandon);

#endif /* MPN_RMA_WINDOW_H_ */
