/*
 * eager.h - the inbox of a pair, for small messages between processes whose
 * kernels run at the same time (MPS).  Where the two-hop handshake ("ready",
 * copy, "done") costs two flag latencies, an eager message costs one: the
 * sender copies it into the inbox slot of its number and raises the
 * message's "done" flag; the receiver waits for that flag and copies the
 * message out.  The inbox sits in the pair's device flag block, after the
 * flags.
 *
 * Which protocol a message takes is decided by the side that posts first
 * (by its own size and parameters) and followed by the second, so sides
 * whose sizes or parameters differ never wait for different flags.  Eager
 * messages are numbered apart (both sides count them, in the order they
 * post, and know whether every earlier message of the pair was eager), so
 * they fill the slots in turn whatever took the two-hop path in between.
 * The first side takes the inbox only if the message's slot is already
 * free: the receiver's stream writes its eager number + 1 to the pair's host
 * memory once it has copied a message out (mpn_pair_mem_t.eager_free), and
 * the host reads it there.  So no stream ever waits for a slot: a sender
 * never waits for a receiver's later work, whatever the groups on either
 * side hold.
 */
#ifndef MPN_P2P_EAGER_H_
#define MPN_P2P_EAGER_H_

#include <cuda.h>
#include <stdint.h>

#include "cuda/ipc.h"
#include "p2p/pair.h"

/** Bytes of one slot: the largest eager message (MPINCCL_EAGER_MAX at most). */
#define MPN_EAGER_SLOT_BYTES 4096
/** Offsets in the device flag block: the size words, one per slot, then the slots. */
#define MPN_EAGER_SIZES_OFFSET ((size_t)16384)
#define MPN_EAGER_DATA_OFFSET ((size_t)32768)

_Static_assert(MPN_PAIR_FLAGS * sizeof(uint64_t) <= MPN_EAGER_SIZES_OFFSET,
               "the pair's flags run into the inbox");
_Static_assert(MPN_EAGER_SIZES_OFFSET + MPN_EAGER_SLOTS * sizeof(uint64_t) <= MPN_PAIR_DSIGNAL_OFFSET,
               "the inbox's size words run into the signals");
_Static_assert(MPN_PAIR_DSIGNAL_OFFSET + MPN_PAIR_RMA_CTX * sizeof(uint64_t) <= MPN_PAIR_DZERO_BYTES &&
                   MPN_PAIR_DZERO_BYTES <= MPN_EAGER_DATA_OFFSET,
               "the signals run into the inbox's slots");
_Static_assert(MPN_EAGER_DATA_OFFSET + (size_t)MPN_EAGER_SLOTS * MPN_EAGER_SLOT_BYTES <= MPN_IPC_BLOCK_BYTES,
               "the inbox does not fit the pair's device block");

/** Whether the eager message numbered n (from 0) may take its slot of the
 * pair's inbox: the pair has one (its flags live in device memory) and the
 * message n - MPN_EAGER_SLOTS that used the slot before has been copied out. */
static inline int mpn_eager_free(const mpn_pair_t* pair, uint64_t n) {
  if (pair->dflags == 0) return 0;
  if (n < MPN_EAGER_SLOTS) return 1;
  uint64_t freed = __atomic_load_n(&pair->mem->eager_free[n % MPN_EAGER_SLOTS], __ATOMIC_ACQUIRE);
  return freed >= n - MPN_EAGER_SLOTS + 1;
}

/** Device address of the word that frees eager message n's slot (written n + 1 once copied out). */
static inline CUdeviceptr mpn_eager_freed(const mpn_pair_t* pair, uint64_t n) {
  return mpn_pair_dev(pair, &pair->mem->eager_free[n % MPN_EAGER_SLOTS]);
}

/** Device address of eager message n's slot. */
static inline CUdeviceptr mpn_eager_data(const mpn_pair_t* pair, uint64_t n) {
  return pair->dflags + MPN_EAGER_DATA_OFFSET + (CUdeviceptr)(n % MPN_EAGER_SLOTS) * MPN_EAGER_SLOT_BYTES;
}

/** Device address of the word that carries eager message n's size (written with the data). */
static inline CUdeviceptr mpn_eager_size(const mpn_pair_t* pair, uint64_t n) {
  return pair->dflags + MPN_EAGER_SIZES_OFFSET + (CUdeviceptr)(n % MPN_EAGER_SLOTS) * sizeof(uint64_t);
}

#endif /* MPN_P2P_EAGER_H_ */
