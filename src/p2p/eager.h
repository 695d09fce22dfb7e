/*
 * eager.h - the inbox of a pair, for small and medium messages (two rings
 * of slots, below) between processes of one GPU: whose kernels run at the
 * same time (MPS), or, in launches with several processes of a time-sliced
 * GPU, any (p2p.c).  Where the two-hop handshake ("ready", copy, "done")
 * costs two flag latencies, an eager message costs one: the sender copies
 * it into the inbox slot of its number and raises the message's "done"
 * flag; the receiver waits for that flag and copies the message out.  The
 * inbox sits in the pair's device flag block, after the flags.
 *
 * Which protocol a message takes is decided by the side that posts first
 * (by its own size and parameters) and followed by the second, so sides
 * whose sizes or parameters differ never wait for different flags.  Eager
 * messages are numbered apart (both sides count them, in the order they
 * post, and know whether every earlier message of the pair was eager), so
 * they fill the slots in turn whatever took the two-hop path in between.
 * The first side takes the inbox only if the message's slot is already
 * free: once the receiver has copied a message out, its eager number + 1
 * reaches the pair's host memory (mpn_pair_mem_t.eager_free; written by
 * the copy kernel or a stream memory operation), and the host reads it
 * there.  So no stream ever waits for a slot: a sender's stream never waits
 * for a receiver's later work, whatever the groups on either side hold.
 * (On a time-sliced GPU the host may wait for the word, bounded: p2p.c,
 * slot_wait.)
 */
#ifndef MPN_P2P_EAGER_H_
#define MPN_P2P_EAGER_H_

#include <cuda.h>
#include <stdint.h>

#include "cuda/ipc.h"
#include "p2p/pair.h"

/** Bytes of one small slot: the largest message of the small ring (MPINCCL_EAGER_MAX at most). */
#define MPN_EAGER_SLOT_BYTES 4096
/** Offsets in the device flag block: the size words, one per slot, then the slots. */
#define MPN_EAGER_SIZES_OFFSET ((size_t)16384)
#define MPN_EAGER_DATA_OFFSET ((size_t)32768)

/*
 * Larger messages (a halo's faces, up to MPINCCL_EAGER_BIG_MAX) have a ring
 * of their own: a few big slots after the small ones, their size words
 * after the small ones' (in the zeroed part of the block), their own
 * numbering and their own "freed" words.  A message takes the small ring
 * (kind MPN_EAGER_SMALL) or the big one (MPN_EAGER_BIG) by its size, as the
 * first side decides.
 */
enum { MPN_EAGER_NONE = 0, MPN_EAGER_SMALL = 1, MPN_EAGER_BIG = 2, MPN_EAGER_GRAPH = 3 };
/* 376 KiB: with 128 small slots, 4 of them fill the pair's 2 MiB block and
 * take the faces of a 2-rank decomposition (halo3d's are 288 KiB). */
#define MPN_EAGER_BIG_BYTES ((size_t)385024)
#define MPN_EAGER_BIG_SIZES_OFFSET (MPN_EAGER_SIZES_OFFSET + MPN_EAGER_SLOTS * sizeof(uint64_t))
#define MPN_EAGER_BIG_DATA_OFFSET (MPN_EAGER_DATA_OFFSET + (size_t)MPN_EAGER_SLOTS * MPN_EAGER_SLOT_BYTES)

/* Then one counter per slot (small ones, then big ones), in the zeroed part
 * of the block after the signals: the blocks of the receiver's copy out of
 * the slot count themselves there, and the last frees the slot
 * (mpn_copy_t.then). */
#define MPN_EAGER_ARRIVALS_OFFSET ((size_t)24576)

_Static_assert(MPN_PAIR_FLAGS * sizeof(uint64_t) <= MPN_EAGER_SIZES_OFFSET,
               "the pair's flags run into the inbox");
_Static_assert(MPN_EAGER_SIZES_OFFSET + MPN_EAGER_SLOTS * sizeof(uint64_t) <= MPN_PAIR_DSIGNAL_OFFSET,
               "the inbox's size words run into the signals");
_Static_assert(MPN_PAIR_DSIGNAL_OFFSET + MPN_PAIR_RMA_CTX * sizeof(uint64_t) <= MPN_PAIR_DZERO_BYTES &&
                   MPN_PAIR_DZERO_BYTES <= MPN_EAGER_DATA_OFFSET,
               "the signals run into the inbox's slots");
_Static_assert(MPN_PAIR_DSIGNAL_OFFSET + MPN_PAIR_RMA_CTX * sizeof(uint64_t) <= MPN_EAGER_ARRIVALS_OFFSET &&
                   MPN_EAGER_ARRIVALS_OFFSET + (MPN_EAGER_SLOTS + MPN_EAGER_BIG_SLOTS) * sizeof(uint32_t) <=
                       MPN_PAIR_DZERO_BYTES,
               "the slots' counters run into the signals or out of the zeroed part");
_Static_assert(MPN_EAGER_BIG_SIZES_OFFSET + MPN_EAGER_BIG_SLOTS * sizeof(uint64_t) <= MPN_PAIR_DSIGNAL_OFFSET,
               "the big slots' size words run into the signals");
_Static_assert(MPN_EAGER_BIG_DATA_OFFSET + (size_t)MPN_EAGER_BIG_SLOTS * MPN_EAGER_BIG_BYTES <= MPN_IPC_BLOCK_BYTES,
               "the inbox does not fit the pair's device block");

/*
 * Captured messages up to MPN_EAGER_SLOT_BYTES (kind MPN_EAGER_GRAPH) have
 * an inbox slot of their own: the one of their graph slot, which the
 * message holds as long as a graph that captured it lives, in a second
 * part of the pair's device block.  Its flag is the graph slot's "done",
 * 0 while the slot is free: the sender waits for bit 0 clear
 * (MPN_PAIR_GRAPH_FREE), copies in and writes 1; the receiver waits for at
 * least 1, copies out and puts it back to 0 (a release writes
 * MPN_PAIR_GRAPH_RELEASED, which both waits accept).  So every replay
 * starts from the same state, and a replay's copy in waits for the
 * previous replay's copy out.  Only launches holding MPINCCL_EAGER_GRAPH
 * such messages on a stream take it (eager.c).
 */
#define MPN_EAGER_GRAPH_DATA_OFFSET ((size_t)MPN_IPC_BLOCK_BYTES)
#define MPN_EAGER_GRAPH_SIZES_OFFSET (MPN_EAGER_GRAPH_DATA_OFFSET + (size_t)MPN_PAIR_GRAPH_SLOTS * MPN_EAGER_SLOT_BYTES)
/** Bytes of the pair's device block: flags, signals, the inbox, then the graph slots' inbox. */
#define MPN_PAIR_DBLOCK_BYTES ((size_t)2 * MPN_IPC_BLOCK_BYTES)
_Static_assert(MPN_EAGER_GRAPH_SIZES_OFFSET + MPN_PAIR_GRAPH_SLOTS * sizeof(uint64_t) <= MPN_PAIR_DBLOCK_BYTES,
               "the graph slots' inbox does not fit the pair's device block");

/** Whether the pair's device block holds the graph slots' inbox (its
 *  creator made it with MPINCCL_EAGER_GRAPH: pair.c, flags_publish). */
static inline int mpn_eager_graph_ok(const mpn_pair_t* pair) {
  return pair->dflags != 0 && pair->mem->flags_desc.size >= MPN_PAIR_DBLOCK_BYTES;
}

/** Slots of a ring. */
static inline uint64_t mpn_eager_slots(int kind) {
  return kind == MPN_EAGER_BIG ? MPN_EAGER_BIG_SLOTS : MPN_EAGER_SLOTS;
}

/** Host word that frees slot n of a ring (eager number + 1 once copied out). */
static inline uint64_t* mpn_eager_free_word(const mpn_pair_t* pair, int kind, uint64_t n) {
  uint64_t* words = kind == MPN_EAGER_BIG ? pair->mem->eager_big_free : pair->mem->eager_free;
  return &words[n % mpn_eager_slots(kind)];
}

/** Whether the eager message numbered n (from 0) of ring kind may take its
 * slot: the pair has an inbox (its flags live in device memory) and the
 * message that used the slot before has been copied out. */
static inline int mpn_eager_free(const mpn_pair_t* pair, int kind, uint64_t n) {
  if (pair->dflags == 0) return 0;
  uint64_t slots = mpn_eager_slots(kind);
  if (n < slots) return 1;
  return __atomic_load_n(mpn_eager_free_word(pair, kind, n), __ATOMIC_ACQUIRE) >= n - slots + 1;
}

/** Device address of the word that frees eager message n's slot (written n + 1 once copied out). */
static inline CUdeviceptr mpn_eager_freed(const mpn_pair_t* pair, int kind, uint64_t n) {
  return mpn_pair_dev(pair, mpn_eager_free_word(pair, kind, n));
}

/** Device address of eager message n's slot (MPN_EAGER_GRAPH: n is the graph slot). */
static inline CUdeviceptr mpn_eager_data(const mpn_pair_t* pair, int kind, uint64_t n) {
  if (kind == MPN_EAGER_GRAPH)
    return pair->dflags + MPN_EAGER_GRAPH_DATA_OFFSET + (CUdeviceptr)n * MPN_EAGER_SLOT_BYTES;
  if (kind == MPN_EAGER_BIG)
    return pair->dflags + MPN_EAGER_BIG_DATA_OFFSET + (CUdeviceptr)(n % MPN_EAGER_BIG_SLOTS) * MPN_EAGER_BIG_BYTES;
  return pair->dflags + MPN_EAGER_DATA_OFFSET + (CUdeviceptr)(n % MPN_EAGER_SLOTS) * MPN_EAGER_SLOT_BYTES;
}

/** Device address of the word that carries eager message n's size (written with the data). */
static inline CUdeviceptr mpn_eager_size(const mpn_pair_t* pair, int kind, uint64_t n) {
  if (kind == MPN_EAGER_GRAPH) return pair->dflags + MPN_EAGER_GRAPH_SIZES_OFFSET + (CUdeviceptr)n * sizeof(uint64_t);
  size_t at = kind == MPN_EAGER_BIG ? MPN_EAGER_BIG_SIZES_OFFSET : MPN_EAGER_SIZES_OFFSET;
  return pair->dflags + at + (CUdeviceptr)(n % mpn_eager_slots(kind)) * sizeof(uint64_t);
}

/** Device address of the counter of eager message n's slot (zero between uses). */
static inline CUdeviceptr mpn_eager_arrivals(const mpn_pair_t* pair, int kind, uint64_t n) {
  uint64_t at = kind == MPN_EAGER_BIG ? MPN_EAGER_SLOTS + n % MPN_EAGER_BIG_SLOTS : n % MPN_EAGER_SLOTS;
  return pair->dflags + MPN_EAGER_ARRIVALS_OFFSET + (CUdeviceptr)at * sizeof(uint32_t);
}

struct mpn_plan;

/** Sets p->eager_ok (MPN_EAGER_*): the inbox p's message would take if its
 *  side posts first, by its size, its peer and the parameters. */
void mpn_eager_choose(struct mpn_plan* p);

/** Keeps captured messages of a launch (the n plans) out of their graph
 *  slots' inbox on each stream that holds fewer of them than
 *  MPINCCL_EAGER_GRAPH: they take the two-hop handshake. */
void mpn_eager_graph_by_launch(struct mpn_plan* plans, int n);

/** The message of p goes through the inbox kind (its slot: p->eager_n): the
 *  sender copies bytes in, the receiver at most bytes out (fewer if the
 *  size word says so). */
void mpn_eager_plan(struct mpn_plan* p, int kind, size_t bytes);

#endif /* MPN_P2P_EAGER_H_ */
