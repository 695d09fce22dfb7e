/*
 * pair.h - the meeting point of one sender and one receiver rank: a ring of
 * message slots in shared memory that both processes map (lazily, on first
 * use).  The n-th send and the n-th receive of the pair meet in slot n % K:
 * each side writes its descriptor, then claims the slot atomically; the side
 * that arrives second learns both buffers and moves the data on its own
 * stream, while the first only signals "my buffer is ready" and waits for
 * "done".  Neither host waits for the other to post, except briefly and
 * bounded where that saves a GPU time-sliced between processes a context
 * switch (p2p.c: delegation, inbox slots).
 */
#ifndef MPN_P2P_PAIR_H_
#define MPN_P2P_PAIR_H_

#include <cuda.h>
#include <stdint.h>

#include "core/config.h"
#include "cuda/ipc.h"
#include "nccl.h"
#include "p2p/p2p.h"

#define MPN_PAIR_SLOTS 512
/* Messages captured in CUDA graphs keep their slot while a graph that
 * holds them lives on either side (it may be replayed any number of times);
 * the slot serves again once both sides destroyed those graphs (graphs.c). */
#define MPN_PAIR_GRAPH_SLOTS 256

enum { MPN_SIDE_SEND = 0, MPN_SIDE_RECV = 1 };

/** Slots of a pair's inbox (p2p/eager.h): messages a sender may run ahead of
 * the receiver's copies before its small messages take the two-hop path. */
#define MPN_EAGER_SLOTS 128
/** Slots of its ring of big slots (messages above MPINCCL_EAGER_MAX). */
#define MPN_EAGER_BIG_SLOTS 4

/** RMA contexts a pair carries signals for (the largest numRmaCtx accepted). */
#define MPN_PAIR_RMA_CTX MPN_CONFIG_RMA_CTX_MAX
/** Signals of a pair that CUDA graphs may capture, shared out among the contexts. */
#define MPN_PAIR_RMA_GRAPH 256

/** One side of a message: enough for the other side to reach the buffer. */
typedef struct {
  uint64_t proc;       /**< process of the buffer's owner */
  uint64_t ptr;        /**< the buffer in its owner's address space */
  uint64_t bytes;
  uint64_t count;
  int32_t dtype;
  int32_t exported;    /**< 1: ipc is valid (owner is another process); negative: this side refused its buffer
                            (not shareable, or shorter than the message: nothing moves), minus the refusal's
                            ncclResult_t; 0: neither */
  int32_t event_dev;   /**< device of event */
  int32_t eager;       /**< the inbox ring (eager.h, MPN_EAGER_*) the message takes if this side posted first */
  uint64_t event;      /**< same process: cudaEvent_t recorded where this side posted, or 0 */
  uint64_t eager_n;    /**< eager: the message's number among the pair's eager ones */
  uint64_t launch;     /**< which launch of its process posted it: a second side moves the
                            messages of each of this process's launches in their order (issue.c) */
  uint64_t in_way_base; /**< with in_way_size: the other side still maps freed allocations of this */
  uint64_t in_way_size; /**< process overlapping this range (the buffer's allocation), which went to a
                             stage; it closes them (mpn_ipc_drop_in_way).  0: none */
  mpn_ipc_desc_t ipc;
} mpn_side_t;

/** Slot states: sequence number << 3 | which sides posted | consumed. */
enum { MPN_SLOT_SEND = 1, MPN_SLOT_RECV = 2, MPN_SLOT_DONE = 4 };

typedef struct {
  uint64_t state;    /**< atomic; see above */
  int32_t mismatch;  /**< set by the second side: count or type differ */
  int32_t done_dev;  /**< device of done_event */
  uint64_t done_event; /**< same process: cudaEvent_t the second side recorded after moving */
  uint64_t done_seq;   /**< message whose done_event is published (release) */
  uint64_t released[2]; /**< graph slots, per side (MPN_SIDE_*): the last message whose graphs on that
                             side are all destroyed (pair.c; only grows, so never reset) */
  uint64_t capture[2];  /**< graph slots, per side: the capture (CUDA's id in that side's process) that
                             took the slot's message, written and read by that side only */
  uint64_t ready;    /**< stream flag: first side's buffer is ready (own line) */
  uint64_t pad3[7];
  uint64_t done;     /**< stream flag: the data moved (own line) */
  uint64_t pad4[7];
  mpn_side_t side[2];
} __attribute__((aligned(64))) mpn_slot_t;

/** Who made a pair file, so that any process of the host can tell a file
 * whose creator is gone (killed before the peer opened it) from one still
 * in use (mpn_pair_sweep).  magic is written last. */
typedef struct {
  uint64_t pidns;      /**< the creator's PID namespace (mpn_proc_pidns) */
  uint64_t start_time; /**< its start time (mpn_proc_start_time), 0: unknown */
  int32_t pid;
  uint32_t magic; /**< MPN_PAIR_MAGIC once the fields above are set, else 0 */
  uint64_t pad;
} mpn_pair_creator_t;

#define MPN_PAIR_MAGIC 0x6d706e70u /* "mpnp" */

/* Where the pair's stream flags live, as published by the file's creator. */
enum { MPN_FLAGS_UNSET = 0, MPN_FLAGS_HOST = 1, MPN_FLAGS_DEVICE = 2, MPN_FLAGS_FAILED = 3 };

/** Errors left for one side of a pair by the other (mpn_pair_report). */
typedef struct {
  char text[256]; /**< the last one, for that side's ncclGetLastError */
  uint64_t count; /**< how many were left (mismatches, failed mappings) */
  uint32_t code;  /**< ncclResult_t of the last one */
  uint32_t pad;
} mpn_pair_error_t;

typedef struct {
  /** [side] (MPN_SIDE_*): what the other side left for it.  Apart, so that
   *  a side that polls the pair never takes its own report for its peer's. */
  mpn_pair_error_t error[2];
  uint32_t flags_where;             /**< MPN_FLAGS_*, set last by the creator */
  uint32_t pad0;
  uint64_t flags_owner;              /**< device flags: the creator's process ... */
  mpn_ipc_desc_t flags_desc;         /**< ... and its allocation */
  uint32_t name_gone;                /**< the second side unlinked the file's name (pair.c) */
  uint32_t aborted;                  /**< a side aborted its communicator and released the flags (p2p.c) */
  /** What a side left at a normal destroy of its communicator, for the
   *  other side's watchdog to judge its process's exit (p2p.c, rma.c): */
  uint32_t left[2];                           /**< [side]: set last, once the side's record is whole */
  uint64_t left_posted[2][2];                 /**< [side][plain, captured]: the messages that side posted */
  uint64_t left_signals[2][MPN_PAIR_RMA_CTX]; /**< [plain, captured][ctx]: the sender's one-sided signals */
  mpn_pair_creator_t creator; /**< set by the creator before anything else (pair.c) */
  /** One-sided signals from the pair's sender to its receiver, one per RMA
   * context: the sender's running count, written by its streams, waited
   * for by the receiver's (rma.c).  Used only where the pair's flags are in
   * host memory; otherwise they are in the device block (mpn_pair_signal). */
  uint64_t rma_signal[MPN_PAIR_RMA_CTX] __attribute__((aligned(64)));
  /** Signals captured in CUDA graphs, one flag pair per captured signal
   * (rma.c): "signal" goes 0 -> 1 (sender) -> 0 (receiver, having seen it),
   * "busy" 0 -> 1 (sender, before signalling) -> 0 (receiver, after
   * clearing "signal"), so that a replay never signals over a signal not
   * yet seen. */
  uint64_t rma_graph_signal[MPN_PAIR_RMA_GRAPH] __attribute__((aligned(64)));
  uint64_t rma_graph_busy[MPN_PAIR_RMA_GRAPH] __attribute__((aligned(64)));
  /** Per such slot and side (MPN_SIDE_SEND: the signalling rank), the last
   * signal of the slot whose graphs on that side are all destroyed (pair.c;
   * only raised): the slot serves again once both reach its last signal. */
  uint64_t rma_graph_released[MPN_PAIR_RMA_GRAPH][2] __attribute__((aligned(64)));
  /** Per such slot and side, the capture (CUDA's id in that side's process)
   * that took its last signal: written and read by that side only. */
  uint64_t rma_graph_capture[MPN_PAIR_RMA_GRAPH][2] __attribute__((aligned(64)));
  /** Inbox slots (p2p/eager.h): the eager number + 1 of the last message
   * copied out of each, written by the receiver's streams, read by both hosts. */
  uint64_t eager_free[MPN_EAGER_SLOTS] __attribute__((aligned(64)));
  uint64_t eager_big_free[MPN_EAGER_BIG_SLOTS] __attribute__((aligned(64))); /**< the same, big slots */
  mpn_slot_t slots[MPN_PAIR_SLOTS];
  mpn_slot_t graph_slots[MPN_PAIR_GRAPH_SLOTS];
} mpn_pair_mem_t;

/** A mapped pair. */
typedef struct mpn_pair {
  mpn_pair_mem_t* mem;   /**< host view */
  CUdeviceptr dev;       /**< device view of the same memory (for memops) */
  CUdeviceptr dflags;    /**< flags in device memory (MPINCCL_FLAGS=device), else 0 */
  int dflags_dev;        /**< the device dflags was allocated on, where this process made it */
  void* rma_rings;       /**< one-sided event rings of ranks of this process (rma/local.c) */
  void (*rma_rings_free)(void*); /**< how to free them */
  mpn_ipc_ref_t dflags_import; /**< the other side's import of the creator's dflags */
  char name[96];
  int created;           /**< this process made the file (unlinks it) */
  uint64_t gen;          /**< this mapping's number in the process (never reused) */
} mpn_pair_t;

/**
 * Maps the pair sender -> receiver of the communicator named key, creating
 * the shared-memory file if the peer has not yet.  Both sides may call this
 * at the same time.  The side that did not create the file waits for the
 * creator's set-up: until MPINCCL_BOOTSTRAP_TIMEOUT, the creator's end, or
 * *abort (the communicator's abort flag; may be NULL) turning non-zero.
 */
ncclResult_t mpn_pair_map(uint64_t key, int sender, int receiver, const volatile int* abort, mpn_pair_t** out);

/** Unmaps; what this process created goes too (its name, its device
 *  block) unless the peer, in another process (elsewhere), has not opened
 *  it yet: then it stays for the peer to take what was posted into it, and
 *  its device block goes at a later unmap once the peer took it (pair.c,
 *  kept pairs).  A peer in this process shares the mapping. */
void mpn_pair_unmap(mpn_pair_t* pair, int elsewhere);

/** As mpn_pair_unmap, but the memory stays mapped for good: an abort whose
 *  device still runs work that may use it (p2p.h, mpn_p2p_abort_drain),
 *  where freeing it would wait for that work. */
void mpn_pair_abandon(mpn_pair_t* pair);

/** Pairs this process keeps for a peer that has not taken them yet (for tests). */
int mpn_pair_kept(void);

/**
 * The device blocks of dev among the pairs kept for peers are forgotten,
 * not freed: the program reset dev (core/renew.h), so they went with its
 * context, and a cudaFree of their addresses now could free new memory.
 */
void mpn_pair_forget_device(int dev);

/** Marks a pair file's memory as made by this process (its creator). */
void mpn_pair_stamp(mpn_pair_mem_t* mem);

/**
 * Removes the stale pair files of /dev/shm: files of this user, named as
 * pair files and of their size, whose creator (mpn_pair_stamp) is gone from
 * this PID namespace (mpn_proc_gone).  A file whose creator lives or cannot
 * be judged (not stamped, another namespace) stays.  Returns how many went.
 * mpn_pair_map runs it once per process, before its first file.
 */
int mpn_pair_sweep(void);

/** Result of posting one side of a message. */
typedef enum { MPN_POST_FIRST, MPN_POST_SECOND } mpn_post_role_t;

/** The graph slot (index) of captured message seq (>= 1). */
static inline uint32_t mpn_pair_graph_index(uint64_t seq) { return (uint32_t)((seq - 1) % MPN_PAIR_GRAPH_SLOTS); }

/** The slot of message seq (>= 1) in the plain or the graph ring. */
static inline mpn_slot_t* mpn_pair_slot(const mpn_pair_t* pair, uint64_t seq, int graph) {
  return graph ? &pair->mem->graph_slots[mpn_pair_graph_index(seq)] : &pair->mem->slots[seq % MPN_PAIR_SLOTS];
}

/**
 * Posts this side of message seq (>= 1) and tells whether the other side was
 * already there.  ncclInvalidUsage when the slot still holds message
 * seq - MPN_PAIR_SLOTS (too many messages outstanding on this pair), or, for
 * graph messages, when a graph that captured message seq -
 * MPN_PAIR_GRAPH_SLOTS is not destroyed yet on either side
 * (mpn_pair_graph_busy).  capture: a graph message's capture (CUDA's id,
 * or 0 if unknown), which the slot keeps for this side.
 */
ncclResult_t mpn_pair_post(mpn_pair_t* pair, uint64_t seq, int graph, unsigned long long capture, int side,
                           const mpn_side_t* desc, mpn_post_role_t* role);

/** Whether message seq's slot in the plain ring is still held by message
 * seq - MPN_PAIR_SLOTS, which this side posted and the other side has not
 * finished posting (this side is that far ahead of the peer on the host).
 * A slot where only the other side posted it (this side's post was
 * refused) is not waited for: mpn_pair_post refuses at once. */
static inline int mpn_pair_slot_held(const mpn_pair_t* pair, uint64_t seq, int side) {
  uint64_t cur = __atomic_load_n(&mpn_pair_slot(pair, seq, 0)->state, __ATOMIC_ACQUIRE);
  uint64_t mine = side == MPN_SIDE_SEND ? MPN_SLOT_SEND : MPN_SLOT_RECV;
  return cur != 0 && (cur >> 3) + MPN_PAIR_SLOTS == seq && (cur & mine) && (cur & 7) != 7;
}

/** The two kinds of graph slots of a pair. */
enum { MPN_GRAPH_P2P = 0, MPN_GRAPH_RMA = 1 };

/**
 * Graph slots are given back when both sides' graphs that used them are
 * destroyed: a CUDA user object of each graph (p2p/graphs.c) calls
 * mpn_pair_graph_released (slot of kind, message or signal seq, side) from
 * CUDA's thread, which only files the news (no lock, no CUDA call);
 * mpn_pair_graph_reap, on a thread of the library (a launch, a wait for a
 * slot, the watchdog), marks the slots of the pairs still mapped.
 */
void mpn_pair_graph_released(uint64_t gen, int kind, uint32_t slot, uint64_t seq, int side);
void mpn_pair_graph_reap(void);
/** The same, unless the pairs' lock is taken (it may be held across a wait
 *  for a peer or a CUDA call): for the watchdog, which must never block. */
void mpn_pair_graph_reap_try(void);

/** Fills filed, marked and orphaned (the rest: mpn_p2p_graph_stats). */
void mpn_pair_graph_counts(mpn_graph_stats_t* out);

/** Whether both sides' graphs that captured message seq, held by graph slot
 *  s, are destroyed. */
static inline int mpn_pair_graph_gone(const mpn_slot_t* s, uint64_t seq) {
  return __atomic_load_n(&s->released[MPN_SIDE_SEND], __ATOMIC_ACQUIRE) >= seq &&
         __atomic_load_n(&s->released[MPN_SIDE_RECV], __ATOMIC_ACQUIRE) >= seq;
}

/** Whether captured signal seq of the pair may take one-sided graph slot
 *  `slot`, which per_slot signals share in turn (seq, seq - per_slot, ...):
 *  both sides' graphs that captured the one before it are destroyed. */
static inline int mpn_pair_rma_graph_free(const mpn_pair_t* pair, uint32_t slot, uint64_t seq, uint64_t per_slot) {
  const uint64_t* w = pair->mem->rma_graph_released[slot];
  return seq <= per_slot || (__atomic_load_n(&w[MPN_SIDE_SEND], __ATOMIC_ACQUIRE) >= seq - per_slot &&
                             __atomic_load_n(&w[MPN_SIDE_RECV], __ATOMIC_ACQUIRE) >= seq - per_slot);
}

/** Whether graph message seq's slot is held by a message this side took in
 *  capture (which cannot end before this message is posted: no wait helps). */
static inline int mpn_pair_graph_own(const mpn_pair_t* pair, uint64_t seq, int side, unsigned long long capture) {
  const mpn_slot_t* s = mpn_pair_slot(pair, seq, 1);
  return capture != 0 && (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) >> 3) + MPN_PAIR_GRAPH_SLOTS == seq &&
         __atomic_load_n(&s->capture[side], __ATOMIC_ACQUIRE) == capture;
}

/** Whether graph message seq's slot still holds message seq -
 * MPN_PAIR_GRAPH_SLOTS, whose graph is alive on one side or both. */
static inline int mpn_pair_graph_busy(const mpn_pair_t* pair, uint64_t seq) {
  const mpn_slot_t* s = mpn_pair_slot(pair, seq, 1);
  uint64_t cur = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
  return cur != 0 && (cur >> 3) + MPN_PAIR_GRAPH_SLOTS == seq && !((cur & 7) == 7 && mpn_pair_graph_gone(s, cur >> 3));
}

/** Whether the other side of message seq has posted (this side has not yet). */
static inline int mpn_pair_peer_posted(const mpn_pair_t* pair, uint64_t seq, int graph, int side) {
  uint64_t cur = __atomic_load_n(&mpn_pair_slot(pair, seq, graph)->state, __ATOMIC_ACQUIRE);
  uint64_t other = side == MPN_SIDE_SEND ? MPN_SLOT_RECV : MPN_SLOT_SEND;
  return (cur >> 3) == seq && (cur & other);
}

/** Second side only: marks the slot consumed once the other descriptor is read. */
void mpn_pair_consume(mpn_pair_t* pair, uint64_t seq, int graph);

/** Device address of a host variable of the pair's file. */
static inline CUdeviceptr mpn_pair_dev(const mpn_pair_t* pair, const void* host) {
  return pair->dev + (CUdeviceptr)((const char*)host - (const char*)pair->mem);
}

/** Offset of the RMA signals in the device flag block (after the flags and the inbox's size words, p2p/eager.h). */
#define MPN_PAIR_DSIGNAL_OFFSET ((size_t)20480)
/** Bytes of the device flag block that start zeroed (flags, size words, signals). */
#define MPN_PAIR_DZERO_BYTES ((size_t)32768)

/** Device address of the signal of RMA context ctx: in the device flag
 * block where there is one (polled without crossing PCIe), else in the
 * pair's host memory. */
static inline CUdeviceptr mpn_pair_signal(const mpn_pair_t* pair, int ctx) {
  if (pair->dflags) return pair->dflags + MPN_PAIR_DSIGNAL_OFFSET + (CUdeviceptr)ctx * sizeof(uint64_t);
  return mpn_pair_dev(pair, &pair->mem->rma_signal[ctx]);
}

/** Number of flags of a pair: ready and done for every slot of both rings. */
#define MPN_PAIR_FLAGS (2 * (MPN_PAIR_SLOTS + MPN_PAIR_GRAPH_SLOTS))

/** A graph flag as a release leaves it (a peer gone, an abort): at least 1,
 *  which every wait for a captured message's "ready" or "done" accepts,
 *  with bit 0 clear, which the wait of a sender through its graph slot's
 *  inbox accepts (MPN_PAIR_GRAPH_FREE), so one value lets every side go. */
#define MPN_PAIR_GRAPH_RELEASED ((uint64_t)1 << 62)

/** Value of a NOR wait (MPN_MEMOP_WAIT_NOR) for bit 0 of a graph slot's
 *  flag clear: its inbox is free (0), or the pair is released. */
#define MPN_PAIR_GRAPH_FREE (~(uint64_t)1)

/** Device addresses of a slot's stream flags. */
static inline CUdeviceptr mpn_pair_flag(const mpn_pair_t* pair, uint64_t seq, int graph, int done) {
  if (pair->dflags) {
    uint64_t slot = graph ? MPN_PAIR_SLOTS + mpn_pair_graph_index(seq) : seq % MPN_PAIR_SLOTS;
    return pair->dflags + (CUdeviceptr)((2 * slot + (done ? 1 : 0)) * sizeof(uint64_t));
  }
  const mpn_slot_t* s = mpn_pair_slot(pair, seq, graph);
  const char* host = (const char*)(done ? &s->done : &s->ready);
  return pair->dev + (CUdeviceptr)(host - (const char*)pair->mem);
}

/** mpn_pair_report's to_side for a teller that does not know its side. */
#define MPN_PAIR_TO_BOTH 2

/** Leaves an error (code and text) for side to_side of the pair (MPN_SIDE_*,
 * the reporter's other side; MPN_PAIR_TO_BOTH: either), which folds it into
 * its communicator's (mpn_p2p_poll_errors).  A rank's pair with itself is
 * polled as both sides: its own errors are not left there. */
void mpn_pair_report(mpn_pair_t* pair, int to_side, ncclResult_t code, const char* text);

/**
 * Satisfies every wait on the pair, of either side (a peer gone, an abort):
 * flags of messages not captured and signals read as reached, graph flags
 * as MPN_PAIR_GRAPH_RELEASED.  Device flags are written by a copy on a
 * stream of its own, on the current device.  pair may be NULL.
 */
void mpn_pair_release(mpn_pair_t* pair);

#endif /* MPN_P2P_PAIR_H_ */
