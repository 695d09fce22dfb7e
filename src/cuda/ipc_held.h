/*
 * ipc_held.h - the CUDA IPC imports this process holds, published in a
 * shared-memory file that the other processes of the host read.  An owner
 * about to describe a new allocation learns from it whether the peer still
 * maps a freed allocation in the way: the driver would refuse the new one
 * ("already mapped"), and the peer's close of the old one waits for all of
 * its device work, which may wait for this host (docs/P2P.md, known
 * problem 17).  Such a message goes through a stage instead.
 */
#ifndef MPN_CUDA_IPC_HELD_H_
#define MPN_CUDA_IPC_HELD_H_

#include <stddef.h>
#include <stdint.h>

#include "cuda/ipc_closer.h"

/** Opens a file lists at most (more make readers assume any range is held). */
#define MPN_IPC_HELD_MAX 16384

/** Which process a file belongs to: enough to name it and to tell a dead one. */
typedef struct {
  uint64_t pidns;      /**< PID namespace (mpn_proc_pidns), 0: unknown (nothing published) */
  uint64_t start_time; /**< start time (mpn_proc_start_time) */
  int pid;
} mpn_ipc_held_proc_t;

/**
 * Makes this process's file (once; later calls return at once), after
 * removing the files of processes of this PID namespace that are gone.  A
 * process makes it when it first has a peer it may share memory with, so
 * that a missing file means the peer holds nothing.  When it cannot be
 * made, this process's imports go unpublished (logged once): owners then
 * describe their buffers as before, and the import's own fallbacks apply.
 */
void mpn_ipc_held_publish(void);

/** Lists one open (after cudaIpcOpenMemHandle returned it). */
void mpn_ipc_held_add(const mpn_ipc_closing_t* c);

/** Unlists one open of c's owner, range and device (after its close returned). */
void mpn_ipc_held_remove(const mpn_ipc_closing_t* c);

/** Takes every import of device dev off this process's list: the program
 * reset the device (core/renew.h), and its imports went with the context. */
void mpn_ipc_held_forget(int dev);

/**
 * Whether process peer holds an open of an allocation of owner (this
 * process, seen from the peer) that overlaps [base, base + size) without
 * being exactly that range: the allocation there now is new, the open is
 * of a freed one, and the peer cannot map the new one until it has closed
 * the old.  An open of exactly that range does not count: the peer takes
 * the new allocation through it.  1 too when the peer's list overflowed or
 * is being rewritten for too long; 0 when the peer published nothing.
 */
int mpn_ipc_held_in_way(const mpn_ipc_held_proc_t* peer, uint64_t owner, uint64_t base, uint64_t size);

/** This process, as mpn_ipc_held_in_way's peer (tests, and a rank's own description). */
mpn_ipc_held_proc_t mpn_ipc_held_self(void);

/** Writes the name of peer's file (under /dev/shm, without the '/'). */
void mpn_ipc_held_name(const mpn_ipc_held_proc_t* peer, char* name, size_t len);

/** Removes the files of gone processes (as mpn_ipc_held_publish does first); returns how many. */
int mpn_ipc_held_sweep(void);

/** Opens this process lists now (tests). */
int mpn_ipc_held_count(void);

#endif /* MPN_CUDA_IPC_HELD_H_ */
