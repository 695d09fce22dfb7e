/*
 * left.c - one-sided signals at a communicator's normal end: the counts a
 * rank leaves in the pairs it shares with peers of its host, whether a
 * peer whose process is gone sent every signal this rank's waits count on
 * (the watchdog then takes its exit for a normal one: core/watchdog.c),
 * and whether a later wait asks for no more than it sent.
 */
#include "rma/rma.h"

#include "core/comm.h"
#include "p2p/p2p.h"
#include "p2p/pair.h"

void mpn_rma_mark_left(struct ncclComm* comm) {
  const mpn_rma_t* rma = __atomic_load_n(&comm->rma, __ATOMIC_ACQUIRE);
  if (rma == NULL || rma->sent == NULL) return; /* no signal sent: the pairs' zeros say so */
  int nctx = comm->config.num_rma_ctx;
  for (int peer = 0; peer < comm->nranks; peer++) {
    mpn_pair_t* pairs[2];
    mpn_p2p_pairs_made(comm, peer, pairs);
    if (pairs[0] == NULL || peer == comm->rank) continue; /* signals to peer travel in the send pair */
    for (int ctx = 0; ctx < nctx && ctx < MPN_PAIR_RMA_CTX; ctx++) {
      size_t pc = mpn_rma_pc(comm, peer, ctx);
      pairs[0]->mem->left_signals[0][ctx] = rma->sent[pc];
      pairs[0]->mem->left_signals[1][ctx] = rma->graph_sent[pc];
    }
  }
}

int mpn_rma_peer_left(const struct ncclComm* comm, int peer) {
  const mpn_rma_t* rma = __atomic_load_n(&comm->rma, __ATOMIC_ACQUIRE);
  if (rma == NULL || rma->expected == NULL) return 1; /* this rank never waited for a signal */
  mpn_pair_t* pairs[2];
  mpn_p2p_pairs_made(comm, peer, pairs);
  const mpn_pair_mem_t* from = pairs[1] ? pairs[1]->mem : NULL; /* (its left mark: mpn_p2p_peer_left) */
  for (int ctx = 0; ctx < comm->config.num_rma_ctx && ctx < MPN_PAIR_RMA_CTX; ctx++) {
    size_t pc = mpn_rma_pc(comm, peer, ctx);
    uint64_t want = __atomic_load_n(&rma->expected[pc], __ATOMIC_RELAXED);
    uint64_t want_graph = __atomic_load_n(&rma->graph_expected[pc], __ATOMIC_RELAXED);
    if (want == 0 && want_graph == 0) continue;
    if (from == NULL || want > from->left_signals[0][ctx] || want_graph > from->left_signals[1][ctx]) return 0;
  }
  return 1;
}

uint64_t mpn_rma_expected(const struct ncclComm* comm, int peer, int ctx) {
  const mpn_rma_t* rma = __atomic_load_n(&comm->rma, __ATOMIC_ACQUIRE);
  return rma ? __atomic_load_n(&rma->expected[mpn_rma_pc(comm, peer, ctx)], __ATOMIC_RELAXED) : 0;
}

/* The peer's signals are stream writes its destroy waited for before it
 * wrote its record, so every one it counted there has landed, and the puts
 * before it too: a wait for no more needs nothing of the GPU.  Its record
 * is in the pair that carries its signals to this rank (mpn_rma_mark_left);
 * none made here, none of its signals reached this rank. */
int mpn_rma_left_covers(const struct ncclComm* comm, int peer, int ctx, uint64_t need, uint64_t* sent) {
  uint64_t got = 0;
  if (!mpn_comm_peer_ended(comm, peer) || ctx >= MPN_PAIR_RMA_CTX) {
    if (sent) *sent = 0;
    return 0;
  }
  mpn_pair_t* pairs[2];
  mpn_p2p_pairs_made(comm, peer, pairs);
  const mpn_pair_mem_t* from = pairs[1] ? pairs[1]->mem : NULL;
  if (from && __atomic_load_n(&from->left[MPN_SIDE_SEND], __ATOMIC_ACQUIRE)) got = from->left_signals[0][ctx];
  if (sent) *sent = got;
  return need <= got;
}
