/*
 * net.h - a communicator's UCX peers: worker addresses exchanged when the
 * communicator is created (for the peers the transport choice put on UCX),
 * endpoints made by the proxy on first use, and tagged transfers of host
 * memory that complete by writing a flag.  Device data will be staged
 * through pinned host buffers on top of these (issue 5).
 */
#ifndef MPN_UCX_NET_H_
#define MPN_UCX_NET_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

struct ncclComm;

/** Collective over comm: exchanges worker addresses if any peer uses UCX. */
ncclResult_t mpn_ucx_comm_setup(struct ncclComm* comm);

/**
 * Sends bytes of host memory to peer (a UCX peer of comm), the n-th such
 * message matching the peer's n-th mpn_ucx_host_recv from this rank.  Returns
 * at once; *flag becomes value when the buffer may be reused, and *error an
 * ncclResult_t if the transfer failed.
 */
ncclResult_t mpn_ucx_host_send(struct ncclComm* comm, int peer, const void* buf, size_t bytes,
                               uint64_t* flag, uint64_t value, int* error);

/** Receives into host memory; *flag becomes value once the data is there. */
ncclResult_t mpn_ucx_host_recv(struct ncclComm* comm, int peer, void* buf, size_t bytes,
                               uint64_t* flag, uint64_t value, int* error);

/**
 * When an operation may start: once *word >= value.  A stream writes word
 * (a stream memory write into host-mapped memory) when it reaches the
 * operation, so the proxy starts it in stream order without the API thread
 * waiting; NULL: at once.  Operations armed on one word start in post order.
 */
typedef struct {
  const volatile uint64_t* word;
  uint64_t value;
  /** The operation reads or writes the caller's own buffer (not a staging
   * slot): once its lane or communicator failed it is cancelled, not started. */
  int user_buffer;
} mpn_ucx_trigger_t;

/** mpn_ucx_host_send, started when the trigger comes. */
ncclResult_t mpn_ucx_host_send_on(struct ncclComm* comm, int peer, const void* buf, size_t bytes,
                                  const mpn_ucx_trigger_t* when, uint64_t* flag, uint64_t value,
                                  int* error);

/** mpn_ucx_host_recv, posted when the trigger comes. */
ncclResult_t mpn_ucx_host_recv_on(struct ncclComm* comm, int peer, void* buf, size_t bytes,
                                  const mpn_ucx_trigger_t* when, uint64_t* flag, uint64_t value,
                                  int* error);

/** Where a receive's buffer lies in the message it is a chunk of: the
 *  report of a size mismatch names the message's bytes (total). */
typedef struct {
  size_t offset; /**< bytes of the message before the chunk */
  size_t total;  /**< bytes of the whole message */
} mpn_ucx_part_t;

/**
 * A tagged send (send != 0) or receive of host memory with an explicit tag
 * (mpn_ucx_stage_tag, mpn_ucx_graph_tag), started when the trigger comes
 * (when may be NULL); when it fails, release[0..nrelease) are set too (see
 * mpn_ucx_cmd_t).  part (may be NULL: the buffer is the whole message) says
 * where a receive's chunk lies.  A receive of a staged chunk matches the
 * sender's chunk whatever its last bit, and fails with ncclInvalidUsage,
 * the communicator too, when that bit or the size differs from its own:
 * the sender then gets a notice and fails with ncclInvalidUsage as well,
 * and each side fails its operations with the other (mpn_ucx_poll_errors).
 */
ncclResult_t mpn_ucx_tagged_on(struct ncclComm* comm, int send, int peer, void* buf, size_t bytes, uint64_t tag,
                               const mpn_ucx_part_t* part, const mpn_ucx_trigger_t* when, uint64_t* flag,
                               uint64_t value, int* error, uint64_t* release, int nrelease);

/**
 * The tag of chunk chunk of the msg-th staged message from rank src to rank
 * dst (its own tag space, apart from mpn_ucx_host_send's; dst because ranks
 * of one process share its worker), last when it is the message's last
 * chunk: both sides number their messages with a peer in program order and
 * cut them into chunks, each from its own size; the last bit shows where
 * they cut differently.
 */
uint64_t mpn_ucx_stage_tag(const struct ncclComm* comm, int src, int dst, uint64_t msg, uint64_t chunk, int last);

/** The tag of the n-th message from src to dst captured in CUDA graphs
 * (ucx/graph.c; both sides capture their messages in the same order). */
uint64_t mpn_ucx_graph_tag(const struct ncclComm* comm, int src, int dst, uint64_t n);

/** The watchdog found peer's process gone: its UCX operations fail (their
 * streams' waits are released) and so do later ones. */
void mpn_ucx_peer_lost(struct ncclComm* comm, int peer);

/** A peer this rank waits for (its signals): its endpoint is made now if it
 * has none, so that UCX's keepalive finds the peer if it goes. */
void mpn_ucx_peer_watch(struct ncclComm* comm, int peer);

/** Whether UCX reported peer unreachable (its endpoint failed: the process
 * is gone, or its host or the network, or it closed its communicator) and
 * no abort notice of its came. */
int mpn_ucx_peer_unreachable(struct ncclComm* comm, int peer);

/** Whether this rank waits for a signal of peer outside a CUDA graph, or
 *  captured a one-sided call with it, whose replays may wait for it, and
 *  peer's notice that it closed its communicator cleanly has not come. */
int mpn_ucx_peer_awaited(struct ncclComm* comm, int peer);

/** Whether nothing of this rank's waits for peer over UCX: not awaited
 *  (mpn_ucx_peer_awaited) and no operation with it posted and not done
 *  (the watchdog's test for a same-host peer whose process exited). */
int mpn_ucx_peer_idle(struct ncclComm* comm, int peer);

/** Whether peer's notice that it aborted its communicator came (the
 * first peer's: one notice is received per communicator). */
int mpn_ucx_peer_aborted(struct ncclComm* comm, int peer);

/** Folds a failed UCX transfer into the communicator's async error, the
 *  first one's code and text (a peer's abort that came after this rank's
 *  own failure is only mentioned): ncclInvalidUsage for a message whose receive had
 *  another size (the send differs in count or datatype: the receiving side
 *  finds it, the sending side hears of it through a notice), this rank's
 *  own code for a failure of its own (out of memory, a copy CUDA refused),
 *  else ncclRemoteError. */
void mpn_ucx_poll_errors(struct ncclComm* comm);

/**
 * ncclCommAbort: tells every UCX peer that this rank aborted (they fail
 * their operations with it and report ncclRemoteError), waiting at most a
 * second for the notices to arrive (a size mismatch's too, as
 * mpn_ucx_comm_free), then cancels the communicator's
 * operations (releasing the waits of their streams) and closes its
 * endpoints.  mpn_ucx_comm_free still frees the state.
 */
void mpn_ucx_abort(struct ncclComm* comm);

/** Closes the communicator's endpoints and frees its UCX state.  When one
 *  of its receives found a size mismatch, it first waits, at most a second,
 *  for the notice that tells the sender to arrive.  A clean destroy
 *  (comm->ucx_clean, no abort, no failure) first flushes the endpoints it
 *  opened, at most MPINCCL_NET_TIMEOUT, so that sends UCX completed
 *  locally arrive before the forced close. */
void mpn_ucx_comm_free(struct ncclComm* comm);

#endif /* MPN_UCX_NET_H_ */
