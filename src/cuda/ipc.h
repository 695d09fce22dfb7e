/*
 * ipc.h - CUDA IPC for device buffers: export a buffer (handle of its whole
 * allocation, plus the offset) and import a peer's, each cached by the
 * allocation's buffer id, so that a freed and re-used address is noticed and
 * the costly import is paid once per allocation, not once per message.
 */
#ifndef MPN_CUDA_IPC_H_
#define MPN_CUDA_IPC_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "nccl.h"

/**
 * Size of a block of its own for memory we allocate to be shared (the
 * allocation granularity): a slice of a block that a peer has mapped already
 * cannot be mapped by it again ("resource already mapped").
 */
#define MPN_IPC_BLOCK_BYTES ((size_t)2 << 20)

/** Streams whose copies an import tells apart (one event each); an import
 * used from more at once is never closed to make room (see ipc.c). */
#define MPN_IPC_USED_EVENTS 4

/** What a peer process needs to map one buffer. */
typedef struct {
  uint64_t buffer_id; /**< unique per allocation for the life of the process */
  uint64_t base;      /**< the allocation's base in the owner's address space */
  uint64_t offset;    /**< buffer - allocation base */
  uint64_t size;      /**< the allocation's size */
  cudaIpcMemHandle_t handle;
} mpn_ipc_desc_t;

/**
 * Describes the device buffer at ptr for a peer process; cached per
 * allocation, so a known buffer costs one driver query.  *pool is set (and
 * out left unset) for an allocation from a memory pool or of CUDA's virtual
 * memory API (cuMemCreate), which legacy CUDA IPC cannot share: callers
 * stage such buffers, or refuse them.  ncclInvalidArgument when ptr is not device memory,
 * ncclInvalidUsage when its allocation cannot be exported.
 */
ncclResult_t mpn_ipc_export(const void* ptr, const char* what, mpn_ipc_desc_t* out, int* pool);

/**
 * mpn_ipc_export of memory the library allocated itself with cudaMalloc for
 * a peer to map (a stage, a pair's device flags): on a system whose
 * cudaMalloc memory CUDA IPC cannot share (mpn_ipc_export would have it
 * staged), ncclInvalidUsage, "who: CUDA IPC cannot share what ptr", the
 * text comm's too where comm is not NULL.
 */
ncclResult_t mpn_ipc_export_own(ncclComm_t comm, const char* who, const void* ptr, const char* what,
                                mpn_ipc_desc_t* out);

/** Names an import, for mpn_ipc_mark_used. */
typedef struct {
  uint64_t owner, buffer_id;
  int dev;
} mpn_ipc_ref_t;

/**
 * Maps a buffer exported by process owner (see mpn_chan_proc_id) into the
 * calling thread's current device context and returns its address here.
 * Imports are cached by buffer id.  The driver may hand a freed
 * allocation's handle to a new one and then returns the mapping it had
 * (counting the opens).  The driver maps memory once per context: when it
 * says the buffer is mapped already (an import of a freed allocation
 * whose memory the new one reuses), the buffer is taken from that import's
 * mapping if its range holds the whole allocation; else the imports in the
 * way are closed and the open retried, waiting for those closes at most
 * MPINCCL_IPC_CLOSE_WAIT seconds, without the cache's lock (other threads'
 * calls here go on meanwhile).  Closes run on a thread of their own
 * (ipc_closer.h): the driver's close waits for all of the process's GPU
 * work, which may wait for peers that wait for this host.
 */
ncclResult_t mpn_ipc_import(uint64_t owner, const mpn_ipc_desc_t* desc, void** ptr,
                            mpn_ipc_ref_t* ref);

/**
 * Every import handed out must be reported once its copies are issued
 * (captured ones: mpn_ipc_mark_captured): used is an event the caller
 * recorded after them on their stream and keeps alive (it may record it
 * again later, on that stream only); forever: never known idle again, which
 * pins the mapping for good; a NULL event pins it too, as does a fifth
 * stream's event while the copies of four others may still run.  Only
 * imports whose last copies completed may be closed to make room (see
 * ipc.c).  Use takes a forgotten import back (mpn_ipc_forget), but not one
 * of an allocation that a new one of its owner proved freed: that one is
 * still closed once idle.
 */
void mpn_ipc_mark_used(const mpn_ipc_ref_t* ref, cudaEvent_t used, int forever);

/** A CUDA graph's hold on an import (mpn_ipc_mark_captured). */
typedef struct mpn_ipc_pin mpn_ipc_pin_t;

/**
 * Reports an import whose copies were captured in a CUDA graph: its mapping
 * stays open until the news that the graph is gone.  Returns the pin to
 * hang on the graph with mpn_ipc_pin_gone as its news (p2p/graphs.h,
 * mpn_graph_holds_add_to); NULL where the import is unknown, or out of
 * memory: the mapping then stays open for good.
 */
mpn_ipc_pin_t* mpn_ipc_mark_captured(const mpn_ipc_ref_t* ref);

/**
 * The news for pin (an mpn_graph_news_fn): seq != 0, the graphs holding it
 * are gone and the import may be closed again; seq 0, no record was hung,
 * and the mapping stays open for good.  On CUDA's thread: no lock, no CUDA
 * call; the cache takes the news in at its next call.
 */
void mpn_ipc_pin_gone(void* pin, uint32_t slot, uint64_t seq, int side);

/** Imports that cannot be closed now: held open by CUDA graphs, or for good
 *  (for tests). */
int mpn_ipc_held_open(void);

/** Closes an import pinned with mpn_ipc_mark_used(forever = 1) for good. */
void mpn_ipc_release(const mpn_ipc_ref_t* ref);

/**
 * The caller is done with owner's buffer (a window being deregistered):
 * its import on device dev, if any, is closed as soon as nothing uses its
 * mapping (no copy issued with it still running, none being issued, no
 * graph holding it): now, or at a later import or report of use.  Never
 * waits (the stream may be waiting for the peer that is deregistering).
 * A freed buffer's import kept open holds the owner's memory and can stand
 * in the way of the owner's next allocation at that address.
 * The driver maps some allocations inside another's mapping, so one close
 * ends the imports of all of them: where kept (may be NULL, called under
 * the cache's lock) says that another buffer of that mapping is still
 * wanted, nothing is forgotten, and that buffer's own forget later closes
 * the mapping with both.
 */
typedef int (*mpn_ipc_kept_fn)(uint64_t owner, uint64_t buffer_id, int dev);
void mpn_ipc_forget(uint64_t owner, uint64_t buffer_id, int dev, mpn_ipc_kept_fn kept);

/**
 * Owner found, in this process's list of held imports (ipc_held.h), opens of
 * its freed allocations overlapping [base, base + size), where it has a new
 * allocation: those imports are handed to the closing thread, on every
 * device, so that the owner can soon share the new one.  Imports of exactly
 * that range stay (they serve the new allocation), and so do mappings
 * handed out for copies not yet issued or held by a graph (the owner asks
 * again).  Never waits.
 */
void mpn_ipc_drop_in_way(uint64_t owner, uint64_t base, uint64_t size);

/**
 * Forgets device dev's imports, its queued closes and its entries in the
 * list of held imports, and every export (which device an export belongs
 * to is not kept): the program reset the device (core/renew.h), so the
 * mappings, handles and events went with its context, and a new allocation
 * may have an old one's address.  Nothing is closed or destroyed.
 */
void mpn_ipc_forget_device(int dev);

/** Whether owner's buffer is imported on device dev and not forgotten
 *  (mpn_ipc_forget; for tests). */
int mpn_ipc_import_live(uint64_t owner, uint64_t buffer_id, int dev);

/** Entries in the export and import caches (for tests). */
void mpn_ipc_counts(int* exported, int* imported);

#endif /* MPN_CUDA_IPC_H_ */
