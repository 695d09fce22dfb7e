/*
 * net_impl.h - a communicator's UCX state and the notices between its ranks,
 * shared by net.c (set-up, tags, transfers, error reports) and notices.c
 * (the notices' receive and handling, abort and close); nothing else sees them.
 */
#ifndef MPN_UCX_NET_IMPL_H_
#define MPN_UCX_NET_IMPL_H_

#include <stdint.h>

#include "nccl.h"
#include "ucx/proxy.h"

/* A notice between the ranks of a communicator (notice_tag): a rank
 * aborted, or a receive found that the message sent to it has another size
 * (the sender learns of it so; ucx/reports.c, mpn_ucx_report_came), or a rank closed
 * its communicator cleanly (its endpoints fail next, which is then no
 * crash), or a receive of the sender's message failed on the receiving
 * rank (out of memory: the message is never taken; reports.c,
 * failed_here_note), or a send of the notice's sender to the rank it
 * tells failed on the sending rank (out of memory: the message never
 * comes).  Fits a proxy send's inline payload (mpn_ucx_proxy_send_here). */
enum { NOTICE_ABORT = 1, NOTICE_MISMATCH = 2, NOTICE_CLOSED = 3, NOTICE_FAILED = 4, NOTICE_UNSENT = 5 };

typedef struct {
  int32_t from; /* the rank that sends it */
  int32_t kind; /* NOTICE_* */
  int32_t came; /* mismatch: an mpn_ucx_came_t */
  int32_t unused;
  /* mismatch: as in mpn_ucx_mismatch_t; unsent: the message's bytes, and
   * the tag of its send that failed */
  uint64_t expected, got;
} notice_t;

_Static_assert(sizeof(notice_t) <= sizeof(((mpn_ucx_cmd_t*)0)->desc_bytes), "a notice is sent inline");

/** A communicator's UCX state (comm->ucx), made by mpn_ucx_comm_setup. */
struct mpn_ucx_comm {
  mpn_ucx_peer_t* peers; /* nranks; address NULL for peers not on UCX */
  uint64_t *send_seq, *recv_seq;
  int nranks, rank;
  uint64_t key;                      /* comm_tag of the communicator */
  uint64_t holder;                   /* the bootstrap key that holds key's prefix in this process (prefix_agree) */
  int error;                         /* an ncclResult_t set by the proxy when a transfer fails */
  mpn_ucx_failure_t failure;         /* the first transfer that failed */
  int reported;                      /* error already folded into the async error */
  notice_t notice_in;                /* the notice receive's payload */
  notice_t notice_out;               /* what an abort sends */
  int aborted_by;                    /* the rank whose abort notice came, else -1 */
  int failed_by;                     /* the rank whose notice that it failed on its own came, else -1 */
  int unsent_by;                     /* the rank whose notice that its send to this rank failed came, else -1 */
  uint64_t unsent_bytes, unsent_tag; /* that send's message (written before unsent_by) */
  uint64_t notice_done;              /* the notice receive's flag */
  int closed;                        /* mpn_ucx_abort closed the endpoints */
  int closing;                       /* a close or an abort began: the notice receive is not posted again */
  mpn_ucx_mismatch_t mismatch;       /* the first receive of another size than its message */
  mpn_ucx_mismatch_t told;           /* a peer's mismatch notice: a send of this rank did not fit */
};

/** Posts the receive of the peers' notices (again: from the proxy thread,
 * for the next notice); cancelled when the communicator closes. */
ncclResult_t mpn_ucx_notice_post(struct mpn_ucx_comm* u, int again);

/** The hook of a receive that found a size mismatch or a failure of this
 * rank (the state's mismatch.found): tells the peer, then fails it. */
void mpn_ucx_mismatch_found(mpn_ucx_mismatch_t* m);

#endif /* MPN_UCX_NET_IMPL_H_ */
