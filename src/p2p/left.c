/*
 * left.c - send/receive at a communicator's normal end: the record a rank
 * leaves in the pairs it shares with peers of its host, whether a peer
 * whose process is gone left nothing of this rank's waiting (the watchdog
 * then takes its exit for a normal one: core/watchdog.c), and which of its
 * messages a later receive can still take.
 */
#include <stdint.h>

#include "core/comm.h"
#include "core/error.h"
#include "p2p/eager.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"

void mpn_p2p_mark_left(struct ncclComm* comm) {
  for (int peer = 0; peer < comm->nranks; peer++) {
    mpn_pair_t* pairs[2];
    mpn_p2p_pairs_made(comm, peer, pairs);
    uint64_t posted[2][2];
    mpn_p2p_counts(comm, peer, posted);
    for (int side = 0; side < 2; side++) {
      if (pairs[side] == NULL || peer == comm->rank) continue;
      mpn_pair_mem_t* mem = pairs[side]->mem; /* (side: this rank's in pairs[side], MPN_SIDE_*) */
      mem->left_posted[side][0] = posted[side][0];
      mem->left_posted[side][1] = posted[side][1];
      __atomic_store_n(&mem->left[side], 1, __ATOMIC_RELEASE); /* last: after the one-sided counts too */
    }
  }
}

int mpn_p2p_peer_left(const struct ncclComm* comm, int peer) {
  mpn_pair_t* pairs[2];
  mpn_p2p_pairs_made(comm, peer, pairs);
  /* Nothing shared: no record tells a normal end from a crash (and a message
   * the peer sent first through a pair this rank never opened went with it). */
  if (pairs[0] == NULL && pairs[1] == NULL) return 0;
  uint64_t mine[2][2];
  mpn_p2p_counts(comm, peer, mine);
  for (int side = 0; side < 2; side++) { /* this rank's side in pairs[side]; the peer's is the other */
    if (pairs[side] == NULL) continue;
    const mpn_pair_mem_t* mem = pairs[side]->mem;
    int theirs = 1 - side;
    if (!__atomic_load_n(&mem->left[theirs], __ATOMIC_ACQUIRE)) return 0;
    if (mine[side][0] > mem->left_posted[theirs][0] || mine[side][1] > mem->left_posted[theirs][1])
      return 0; /* a message of this rank that the peer never posted */
  }
  return 1;
}

/*
 * A message the peer posted first and this rank has not received waits in
 * the pair: through the inbox (eager.h), its data sits in the pair's device
 * block, else only its descriptor does, naming the peer's own buffer, which
 * went with its process.  The block is the memory of whichever process made
 * the pair file: made here, it lives on with this process and the receive
 * copies the message out as any other.  Made by the peer, it was freed at
 * its destroy (pair.c, mapping_free) and its process is gone: what this
 * process's import of it still reads is nowhere promised, so such a
 * message is refused, as one in the peer's buffer.
 */
ncclResult_t mpn_p2p_left_recv(struct ncclComm* comm, const char* caller, int peer, uint64_t ahead) {
  mpn_pair_t* pairs[2];
  mpn_p2p_pairs_made(comm, peer, pairs);
  uint64_t mine[2][2];
  mpn_p2p_counts(comm, peer, mine);
  const mpn_pair_t* pair = pairs[MPN_SIDE_RECV]; /* peer -> this rank, where the peer's side is the sender's */
  int left = pair && __atomic_load_n(&pair->mem->left[MPN_SIDE_SEND], __ATOMIC_ACQUIRE);
  uint64_t posted = left ? pair->mem->left_posted[MPN_SIDE_SEND][0] : 0;
  uint64_t seq = mine[MPN_SIDE_RECV][0] + ahead + 1; /* the number this receive takes */
  if (seq > posted)
    return MPN_REFUSE(comm, ncclRemoteError,
                      "%s: peer %d ended its communicator (ncclCommDestroy) and its process exited, having posted "
                      "%llu messages to this rank; this receive would take message %llu",
                      caller, peer, (unsigned long long)posted, (unsigned long long)seq);
  const mpn_slot_t* s = mpn_pair_slot(pair, seq, 0);
  uint64_t state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
  int eager = s->side[MPN_SIDE_SEND].eager;
  int waiting = (state >> 3) == seq && (state & MPN_SLOT_SEND) && !(state & MPN_SLOT_RECV);
  int inbox = eager == MPN_EAGER_SMALL || eager == MPN_EAGER_BIG;
  if (waiting && inbox && pair->created && pair->dflags) return ncclSuccess;
  return MPN_REFUSE(comm, ncclRemoteError,
                    "%s: peer %d ended its communicator (ncclCommDestroy) and its process exited; its message %llu "
                    "to this rank %s",
                    caller, peer, (unsigned long long)seq,
                    !waiting ? "is not in the pair they shared"
                    : !inbox ? "was left in its own buffer (not in this rank's inbox), gone with its process"
                             : "is in the inbox of a pair block its process made, freed at its end");
}
