/*
 * sync.h - a stream's flag work and small copies as one kernel, for ranks
 * whose kernels run at the same time (MPS, or different GPUs): the kernel
 * writes the flags that go first, polls the ones it waits for, moves the
 * data, and writes the flags that say so.  Stream memory operations do the
 * same in three or more stream items, each paying the GPU's hand-over from
 * one kind of work to the next; under MPS those hand-overs dominate small
 * exchanges.  Never used where ranks time-slice one GPU: a polling kernel
 * would hold the GPU while the rank it waits for cannot run.
 * Behind a C API so that the library's C code can call it.
 */
#ifndef MPN_CUDA_SYNC_H_
#define MPN_CUDA_SYNC_H_

#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/copy.h"
#include "cuda/flagop.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One flag operation: write value, or wait (flagop.h: >=, ==, >= then
 *  clear, or NOR). */
typedef struct {
  uint64_t addr; /* device address of the 64-bit flag */
  uint64_t value;
  uint32_t kind;   /* MPN_MEMOP_WRITE, MPN_MEMOP_WAIT_GEQ, _WAIT_EQ, _WAIT_GEQ_CLEAR or _WAIT_NOR */
  uint32_t escape; /* a wait: 0, or i for the table's escape word escape[i - 1] (mpn_sync_escape) */
} mpn_sync_flag_t;

/*
 * 32-bit words in host memory (mapped for the GPU) that let a kernel's waits
 * go without their flags: the aborted word of the pair a wait's flag is in
 * (p2p/pair.h), which a side sets when it aborts and a survivor sets for a
 * peer found gone (p2p.h, mpn_p2p_mark_aborted).  The usual release writes
 * the flags themselves, on a stream; but a host whose thread is blocked in
 * a launch (its queue full of kernels that wait) holds the CUDA calls of
 * every other thread of the process, and a plain store needs none.  Only
 * the failed peer's waits go, as with the release.  A wait reads its word
 * now and then, not at every poll; a kernel names at most MPN_SYNC_ESCAPES
 * words (its other waits rely on the release alone).
 */
#define MPN_SYNC_ESCAPES 8

/*
 * Fewest waits for which the kernel pays (MPINCCL_KERNEL_SYNC_WAITS, default
 * 3): it saves a hand-over per wait that stream memory operations would take
 * one after the other, but costs more than one wait batch (MPS, GPU machine:
 * signal barrier of 8 ranks 19.6 us with the kernel, 126 us without; a put
 * ping-pong with one wait 8.8 us with it, 5.9 us without).
 */

/** Flags and copies of one launch; the table travels as the kernel's argument. */
#define MPN_SYNC_FLAGS 96
#define MPN_SYNC_COPIES 32
/*
 * Rounds of waits, copies and writes, one after the other: a group's eager
 * sends (no wait: copies into inboxes, "done"), its other messages' front
 * half (the peers' "ready", the copies this rank moves, "done") and, where a
 * launch has a single stream, its back half too (the peers' "done", copies
 * out of eager inboxes, the words that free their slots).
 */
#define MPN_SYNC_ROUNDS 3

/*
 * Blocks of one launch: one, or where the copies are large, one per
 * MPN_SYNC_BLOCK_BYTES of them up to MPN_SYNC_BLOCKS.  The copies are cut
 * into chunks of that size; blocks take the first writes and each round's
 * chunks from shared counters that no other running launch uses
 * (mpn_sync_grid_take), poll a round's waits before their first chunk of
 * it, and the block that finishes a round's last chunk writes its flags.
 * No block waits for another: the blocks that are resident do everything.
 */
#define MPN_SYNC_BLOCKS 32
#define MPN_SYNC_BLOCK_BYTES ((size_t)65536)
/* Counters of a launch: the first writes, each round's next chunk and
 * chunks done, and the blocks that left. */
#define MPN_SYNC_COUNTERS (2 * MPN_SYNC_ROUNDS + 2)

typedef struct {
  int blocks;       /* 1: no counter */
  uint64_t counter; /* device address of MPN_SYNC_COUNTERS 32-bit counters at 0 (a slot's), blocks > 1 */
  uint64_t done;    /* device address of the slot's word in host memory ... */
  uint64_t epoch;   /* ... which the launch sets to this once the counter is back at 0 */
  int dev;          /* the device whose pool the slot is of, blocks > 1 */
} mpn_sync_grid_t;

/* Parts of the table, in the order their flags are stored. */
enum { MPN_SYNC_FIRST = 0, MPN_SYNC_WAIT = 1, MPN_SYNC_LAST = 2 };

typedef struct {
  int device_scope;             /* every flag and buffer is in this GPU's memory and only kernels of
                                   this GPU read it (or a host reads a word after the kernel's reads):
                                   device-scope fences suffice */
  int nfirst;                   /* writes before anything else */
  int nwait[MPN_SYNC_ROUNDS];   /* per round: waits, */
  int ncopy[MPN_SYNC_ROUNDS];   /* copies, */
  int nlast[MPN_SYNC_ROUNDS];   /* then writes */
  mpn_sync_flag_t flags[MPN_SYNC_FLAGS]; /* first writes, then each round's waits and writes */
  mpn_copy_t copies[MPN_SYNC_COPIES];    /* each round's copies, round 0 first */
  mpn_sync_grid_t grid;                  /* blocks of the launch (one unless mpn_sync_grid_take) */
  uint64_t mark;                         /* device address of a word in device memory the launch sets to
                                            mark_value once all else is done (a finalize's mark,
                                            core/drain.h), or 0 */
  uint64_t mark_value;
  int captured; /* the stream is capturing a CUDA graph: an ordinary launch, never an early one */
  int copies_lost; /* set by mpn_sync_issue: the kernel could not be launched, nor some of its copies
                      enqueued on their own (their flags were still written) */
  int nescape;
  uint64_t escape[MPN_SYNC_ESCAPES]; /* device addresses of the (32-bit) escape words the waits name */
} mpn_sync_t;

/** An empty table. */
static inline void mpn_sync_init(mpn_sync_t* k) {
  k->device_scope = 0;
  k->nfirst = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) k->nwait[r] = k->ncopy[r] = k->nlast[r] = 0;
  k->grid.blocks = 1;
  k->grid.counter = k->grid.done = k->grid.epoch = 0;
  k->grid.dev = 0;
  k->mark = k->mark_value = 0;
  k->captured = 0;
  k->copies_lost = 0;
  k->nescape = 0;
}

/** The index (from 1) of escape word addr in k, added if new; 0 (the wait
 *  has none) for addr 0 or a full list. */
static inline uint32_t mpn_sync_escape(mpn_sync_t* k, uint64_t addr) {
  if (addr == 0) return 0;
  for (int i = 0; i < k->nescape; i++)
    if (k->escape[i] == addr) return (uint32_t)i + 1;
  if (k->nescape == MPN_SYNC_ESCAPES) return 0;
  k->escape[k->nescape++] = addr;
  return (uint32_t)k->nescape;
}

/** Flags in the table so far. */
static inline int mpn_sync_nflags(const mpn_sync_t* k) {
  int n = k->nfirst;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) n += k->nwait[r] + k->nlast[r];
  return n;
}

/** Copies in the table so far. */
static inline int mpn_sync_ncopies(const mpn_sync_t* k) {
  int n = 0;
  for (int r = 0; r < MPN_SYNC_ROUNDS; r++) n += k->ncopy[r];
  return n;
}

/**
 * Appends a flag operation to part (MPN_SYNC_FIRST, _WAIT or _LAST) of
 * round.  Parts must be filled in table order (first writes, round 0's
 * waits, its writes, round 1's waits, ...): returns 0 when f would go
 * before something already there or the table is full.
 */
static inline int mpn_sync_push(mpn_sync_t* k, int round, int part, mpn_sync_flag_t f) {
  int n = mpn_sync_nflags(k);
  if (n == MPN_SYNC_FLAGS) return 0;
  int later = 0; /* entries of parts after this one */
  for (int r = part == MPN_SYNC_FIRST ? 0 : round; r < MPN_SYNC_ROUNDS; r++) {
    if (r > round || part == MPN_SYNC_FIRST) later += k->nwait[r];
    if (r > round || part != MPN_SYNC_LAST) later += k->nlast[r];
  }
  if (later) return 0;
  k->flags[n] = f;
  if (part == MPN_SYNC_FIRST) k->nfirst++;
  else if (part == MPN_SYNC_WAIT) k->nwait[round]++;
  else k->nlast[round]++;
  return 1;
}

/**
 * The first writes run on threads of their own, in no order: two of them to
 * one address would leave either value.  For counters that only grow (the
 * one-sided signals), raises an existing first write to addr to value
 * instead (the highest count implies the lower ones); 0 when there is none.
 */
static inline int mpn_sync_raise(mpn_sync_t* k, uint64_t addr, uint64_t value) {
  for (int i = 0; i < k->nfirst; i++)
    if (k->flags[i].addr == addr && k->flags[i].kind == MPN_MEMOP_WRITE) {
      if (value > k->flags[i].value) k->flags[i].value = value;
      return 1;
    }
  return 0;
}

/** Appends a copy to round (rounds filled in order); 0 when full or out of order. */
static inline int mpn_sync_push_copy(mpn_sync_t* k, int round, mpn_copy_t c) {
  int n = mpn_sync_ncopies(k);
  if (n == MPN_SYNC_COPIES) return 0;
  for (int r = round + 1; r < MPN_SYNC_ROUNDS; r++)
    if (k->ncopy[r]) return 0;
  k->copies[n] = c;
  k->ncopy[round]++;
  return 1;
}

/** Bytes of k's copies (each at most what it says). */
static inline size_t mpn_sync_bytes(const mpn_sync_t* k) {
  size_t bytes = 0;
  for (int i = 0; i < mpn_sync_ncopies(k); i++) bytes += k->copies[i].bytes;
  return bytes;
}

/** Blocks that k's copies call for: one per MPN_SYNC_BLOCK_BYTES of them. */
static inline int mpn_sync_blocks_wanted(const mpn_sync_t* k) {
  size_t b = (mpn_sync_bytes(k) + MPN_SYNC_BLOCK_BYTES - 1) / MPN_SYNC_BLOCK_BYTES;
  return b < 1 ? 1 : b > MPN_SYNC_BLOCKS ? MPN_SYNC_BLOCKS : (int)b;
}

/**
 * Gives k the blocks its copies call for (mpn_sync_blocks_wanted) on device
 * dev (current), at most half the device's multiprocessors shared out among
 * the sharers ranks that use it, with counters of the device's pool that no
 * launch still running holds; one block when none are free or the pool
 * could not be made.  A captured launch (k->captured) keeps its counters
 * until the graphs holding it are gone (mpn_sync_grid_gone): any replay may
 * use them, and each leaves them at 0 for the next.  Not for launches of
 * several streams (a rank's kernel that fills the GPU must not keep out its
 * own kernel of another stream that a peer waits for).
 */
void mpn_sync_grid_take(int dev, int sharers, mpn_sync_t* k);

/**
 * Where the counters of a captured launch k (blocks > 1) are: the owner and
 * slot that mpn_sync_grid_gone takes.
 */
void mpn_sync_grid_slot(const mpn_sync_t* k, void** owner, uint32_t* slot);

/**
 * News that the graphs holding slot of owner's pool are gone (seq != 0; 0:
 * nothing is released), in the form of p2p/graphs.h's mpn_graph_news_fn:
 * on CUDA's thread, so it only files the news (no lock, no CUDA call); the
 * slot serves again at a later mpn_sync_grid_take.
 */
void mpn_sync_grid_gone(void* owner, uint32_t slot, uint64_t seq, int side);

/**
 * Makes device dev's pool of counters now (communicator creation) rather
 * than in the first launch that wants several blocks, where its allocation
 * and synchronization would stall a running exchange (on two H200s about
 * 1 ms, at the first size whose copies took several blocks on a rank that
 * until then had moved nothing).  Failures are left to mpn_sync_grid_take
 * (one block per launch).
 */
void mpn_sync_grid_prepare(int dev);

/**
 * Forgets device dev's pool (the program reset the device, core/renew.h):
 * its memory went with the context, and the next take makes a new pool.
 * The old record is kept, never freed: a graph's news may still come for it
 * (mpn_sync_grid_gone).
 */
void mpn_sync_grid_forget(int dev);

/** Gives k's counters back when its launch failed (it never ran). */
void mpn_sync_grid_release(const mpn_sync_t* k);

/** Sets out[] (room for 2) to the flag kernels; returns their number (kernels.c). */
int mpn_sync_kernels(const void** out);

/**
 * Turns early launches off for the process where the flag kernels were
 * compiled for a compute capability below 9.0 (a build with older PTX, run
 * on a newer GPU): their griddepcontrol.wait, which orders them after their
 * predecessor, is compiled only from 9.0.  Called once they are loaded
 * (kernels.c), on the current device.
 */
void mpn_sync_early_check(void);

/**
 * Enqueues s as one kernel on stream: first writes, then each round's waits,
 * copies, writes.  early: a grid of one block goes as a programmatic
 * dependent launch (sync.cu), or as an ordinary one where the device or
 * driver refuses that (from then on for the process).  A refused launch is
 * cleared from CUDA's last error here, and a table refused before any launch
 * (cudaErrorInvalidValue) was never in it: the caller must not clear it,
 * which would take an unread error of the program's.
 */
cudaError_t mpn_sync_launch(const mpn_sync_t* s, int early, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MPN_CUDA_SYNC_H_ */
