/*
 * proxy.h - the process's UCX context and worker, driven by one proxy thread
 * (proxy.c; what failures lead to, reports.c):
 * every UCX call happens on that thread, so API threads never block on the
 * network; they queue commands, and completions are written to flags (which
 * the data path will make visible to streams).
 */
#ifndef MPN_UCX_PROXY_H_
#define MPN_UCX_PROXY_H_

#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "nccl.h"

/** What came instead of the message a receive expected. */
typedef enum {
  MPN_UCX_CAME_BYTES, /**< a message of got bytes */
  MPN_UCX_CAME_MORE,  /**< a longer message (how long is not known) */
  MPN_UCX_CAME_FEWER  /**< a shorter message (how short is not known) */
} mpn_ucx_came_t;

/** Where a communicator's receives record the first message whose size
 *  differs from the receive's (the matching send's count or datatype
 *  differs); read by mpn_ucx_poll_errors once the error is seen.  Every
 *  other sender whose message did not fit is described in its peer's own
 *  record (mpn_ucx_peer_t report), so that the hook tells that sender too,
 *  once per sender; so is a sender whose message a receive failed to take
 *  on this rank, and a receiver whose message a send failed to send from
 *  this rank (failed_here). */
typedef struct mpn_ucx_mismatch {
  int claimed;     /**< stored (release) once the fields below are written (proxy thread) */
  int from;        /**< that receive's sender */
  size_t expected; /**< bytes of the message the receive was posted for */
  size_t got;      /**< bytes that came, with MPN_UCX_CAME_BYTES */
  mpn_ucx_came_t came;
  /** Run once the record is claimed, on the proxy thread but outside UCX's
   * callbacks (so it may post and cancel): notices.c tells the sender.  Not run
   * when the owner of the claiming receive closes first.  May be NULL. */
  void (*found)(struct mpn_ucx_mismatch* m);
  const void* owner; /**< the claiming receive's owner (proxy thread) */
  /** No size mismatch: a receive from this peer, or a send to it, failed
   *  on this rank (UCX, or this process, could not allocate), which tells
   *  it so instead (a peer's record).  Stored (release) once the fields
   *  are written, by the proxy thread or by the thread whose send could
   *  not be queued (mpn_ucx_proxy_unsent); read with acquire. */
  int failed_here;
  /** With failed_here: that was a send of this rank (tag, of a message of
   *  expected bytes), not a receive; its receiver is told. */
  int failed_send;
  uint64_t tag;
  struct mpn_ucx_mismatch* next; /**< records whose found is due (proxy thread) */
} mpn_ucx_mismatch_t;

/** A peer's endpoint, created by the proxy on first use from its address. */
typedef struct {
  void* address;      /**< the peer worker's address (owned) */
  size_t address_len;
  ucp_ep_h ep;        /**< NULL until the first operation */
  int failed;         /**< its operations fail: UCX reported it unreachable, or it is known gone (proxy thread) */
  int unreachable;    /**< UCX reported it unreachable (its endpoint's error handler; read by the watchdog) */
  int watched;        /**< its endpoint was asked for (mpn_ucx_proxy_watch; API threads) */
  /** How it failed (proxy thread): it went away (UCX found it unreachable,
   *  or its process is gone), or a notice or a size mismatch failed it.  A
   *  receive of a message that came before it went still takes it (only). */
  int went, notified;
  /** A notice is due to it (claimed by exchange, by the proxy thread when
   *  a receive from it finds a size mismatch, or a receive from it or a
   *  send to it failed on this rank, or by the thread whose send to it
   *  could not be queued; read by a close, which waits for the notice's
   *  flags below, written by notices.c). */
  int mismatch_due;
  uint64_t notice_sent, notice_flushed;
  /** Its notice that it closed its communicator cleanly came (notices.c, on the
   *  proxy thread; read by the watchdog): its endpoint's failure that
   *  follows is an end, not a crash. */
  int closed;
  /** The report its hook sends it, where the communicator's record is
   *  another sender's, or a receive from it or a send to it failed on
   *  this rank (written by whoever claimed mismatch_due). */
  mpn_ucx_mismatch_t report;
} mpn_ucx_peer_t;

typedef enum {
  MPN_UCX_SEND,
  MPN_UCX_RECV,
  MPN_UCX_PUT_SIGNAL, /**< put; with a signal: fence, [descriptor put, fence,] atomic add of 1 to a
                           remote counter; then flush */
  MPN_UCX_CALL        /**< run fn(arg) on the proxy thread (context-level UCX calls) */
} mpn_ucx_cmd_kind_t;

/** A remote region as a peer sees it: address and packed key, unpacked on first use. */
typedef struct {
  uint64_t addr;
  const void* packed; /**< the owner's packed rkey */
  ucp_rkey_h rkey;    /**< unpacked on the proxy thread with the peer's endpoint */
} mpn_ucx_remote_t;

/** The first failed operation of a communicator, for its report (net.c). */
typedef struct {
  int taken;  /**< claimed by the first failure, which writes the fields below */
  int ready;  /**< the fields are written */
  int status; /**< its ucs_status_t */
  int code;   /**< the ncclResult_t it was given (mpn_ucx_report_failure in reports.c) */
  mpn_ucx_cmd_kind_t kind;
  int peer; /**< the rank it was with (mpn_ucx_cmd_t from) */
} mpn_ucx_failure_t;

/** One operation for the proxy. */
typedef struct mpn_ucx_cmd {
  mpn_ucx_cmd_kind_t kind;
  const void* owner;    /**< the communicator state it belongs to (for close) */
  mpn_ucx_peer_t* peer; /**< the other side (a receive: may be NULL, then it makes no endpoint) */
  void* buf;
  size_t bytes;
  uint64_t tag;
  /** A staged chunk's receive (ucx/net.c): the tag bit that marks the last
   * chunk of a message.  Ignored in matching, then compared with the
   * sender's: a difference means the two sides cut their messages into
   * different numbers of chunks, a size mismatch (0: the tag matches whole). */
  uint64_t last_bit;
  /** A receive: where its buffer lies in the message it is part of, for the
   * report of a size mismatch (msg_bytes 0: the buffer is the message). */
  size_t msg_offset, msg_bytes;
  uint64_t* flag;       /**< set to value when the operation completes */
  uint64_t value;
  int* error;           /**< set to an ncclResult_t when the operation fails */
  int* owner_error;     /**< the same, for the communicator */
  mpn_ucx_failure_t* failure; /**< where the communicator's first failure is told (may be NULL) */
  /** When set, decremented (atomic, release) once the proxy is done with
   * the command, after its last write to flag and error: a caller that
   * counts its commands in flight here (ucx/gnodes.c, which adds 1 before
   * posting) frees what they name once it reads 0.  Commands still in
   * flight when their owner closes count on the proxy's own word instead. */
  int* pending;
  mpn_ucx_remote_t* dst;    /**< put: the peer's region, at dst_offset */
  size_t dst_offset;
  mpn_ucx_remote_t* signal; /**< put: the peer's counter region, at signal_offset (NULL: no signal) */
  size_t signal_offset;
  mpn_ucx_remote_t* desc;   /**< put: where desc_bytes go before the signal (NULL: nowhere) */
  size_t desc_offset;
  uint64_t desc_bytes[4];   /**< put: a descriptor of the put for the peer (inline); a send of
                                 mpn_ucx_proxy_send_here: its payload */
  /** Put with a descriptor: 1 + the index of the 32-bit word of desc_bytes
   * that is set to 1 when the put's data did not go (an earlier chunk of
   * its message failed, *error, or its own put could not start), so that
   * the signal still goes and tells the peer (0: no such word). */
  unsigned desc_lost;
  uint64_t one;             /**< put: the operand of the atomic add */
  void (*fn)(void*);        /**< call; receive: run after it completed well (may be NULL) */
  /** Receive without a mismatch record: run instead of fn when a message of
   *  another size than bytes came (what came, as in mpn_ucx_mismatch_t),
   *  inside UCX's callback; the receive then fails as any error (may be NULL). */
  void (*misfit)(void* arg, mpn_ucx_came_t came, size_t got);
  /** A communicator's send or receive: its record.  A receive describes
   * there a message of another size than bytes (NULL: a size mismatch
   * fails it as any error); such a receive fails with ncclInvalidUsage,
   * not ncclRemoteError.  Either, failing on this rank for lack of memory,
   * has its peer told through the record's hook (failed_here). */
  mpn_ucx_mismatch_t* mismatch;
  /** A communicator's send: its owner's word, set (release) once a close
   * or an abort began, before the proxy drops the owner's records
   * (mpn_ucx_report_drop): mpn_ucx_proxy_unsent then hands the proxy none
   * (may be NULL). */
  const int* closing;
  int from; /**< the peer's rank (a receive's sender), for reports */
  void* arg;
  int quiet; /**< its failure is expected (a receive cancelled at close): no warning */
  /** When set, the proxy starts the operation only once *trigger >= trigger_value
   * (a word that a stream writes when it reaches the operation). */
  const volatile uint64_t* trigger;
  uint64_t trigger_value;
  /** Set for a pipeline's operations (ucx/staged.c): *flag only grows (the
   * value is stored only if larger), and when the operation fails these
   * words are set to UINT64_MAX >> 1, so that the waits of later operations
   * of the pipeline pass instead of hanging. */
  uint64_t* release;
  int nrelease;
  /** The operation uses the caller's buffer (mpn_ucx_trigger_t): cancelled,
   * not started, once *error or *owner_error is set (a put with desc_lost
   * sends its signal without the data instead). */
  int user_buffer;
  void* request;        /**< UCX request while in flight (proxy thread) */
  int posting, early_done; /**< completion seen inside the posting call (proxy thread) */
  /** Put with signal where UCX's fence orders each lane only (no FENCE_MODE):
   * fencing while the flush of its data is in flight, fenced once that is
   * done, and the atomic goes next (proxy thread). */
  int fencing, fenced;
  int early_status;
  /** A receive posted from a peer that went away, for the message found
   * come before it went: cancelled at this time if still in flight (the
   * rest of the message may never come; proxy thread). */
  uint64_t cancel_at_ns;
  struct mpn_ucx_cmd *next, *prev;
} mpn_ucx_cmd_t;

/**
 * Starts UCX and the proxy thread once per process; returns this worker's
 * address.  near_pci (may be NULL) names the GPU the proxy serves: the thread
 * is bound to the CPUs nearest it.
 */
ncclResult_t mpn_ucx_proxy_start(const char* near_pci, const void** address, size_t* len);

/** The process's UCX context (for mapping memory; use it on the proxy thread, see MPN_UCX_CALL). */
ucp_context_h mpn_ucx_proxy_context(void);

/** What a command kind does, in words ("send", "put with signal"...). */
const char* mpn_ucx_cmd_kind_name(mpn_ucx_cmd_kind_t kind);

/** Queues a command (copied); returns at once. */
ncclResult_t mpn_ucx_proxy_post(const mpn_ucx_cmd_t* cmd);

/** Runs fn(arg) on the proxy thread and waits for it (set-up and teardown
 * only).  When the proxy does not take it up within MPINCCL_BOOTSTRAP_TIMEOUT,
 * returns ncclInternalError and fn will never run: either way arg may go
 * once this returns. */
ncclResult_t mpn_ucx_proxy_call(void (*fn)(void*), void* arg);

/** Whether an operation with peer was posted and is not done: queued,
 *  waiting for its trigger, or in flight.  Asks the proxy thread; 1 when
 *  it does not answer within two seconds. */
int mpn_ucx_proxy_pending(const mpn_ucx_peer_t* peer);

/** The peer's process is known gone (the watchdog): its operations in
 * flight and those started later fail, on the proxy thread; returns at once.
 * owner is the communicator state peer belongs to: its close drops the call
 * if it has not run yet. */
ncclResult_t mpn_ucx_proxy_peer_lost(const void* owner, mpn_ucx_peer_t* peer);

/** Has the proxy make peer's endpoint now, if it has none (returns at
 * once; once per peer): UCX's keepalive then watches it, so that a peer
 * this rank only waits for, on another host, is found if it goes.  owner
 * as in mpn_ucx_proxy_peer_lost. */
ncclResult_t mpn_ucx_proxy_watch(const void* owner, mpn_ucx_peer_t* peer);

/** Proxy thread only (a command's fn): peer's operations in flight fail,
 * and so do those started later. */
void mpn_ucx_proxy_fail_peer(mpn_ucx_peer_t* peer);

/** As mpn_ucx_proxy_fail_peer, but of the operations in flight only the
 * receives are cancelled: a send just started to peer (a notice, on an
 * endpoint maybe still being wired up) must go out, and the sends that
 * peer will never take are released instead (mpn_ucx_proxy_release_sends). */
void mpn_ucx_proxy_fail_peer_receives(mpn_ucx_peer_t* peer);

/** Proxy thread only (a command's fn, a mismatch's found): the pipeline
 * words (mpn_ucx_cmd_t release) of peer's sends and puts in flight are
 * released, as if they had failed, and their *error set; those without
 * pipeline words (a captured group's sends, ucx/graph.c) get their flag.
 * UCX cannot cancel them: one that peer will never take (it found a size
 * mismatch and failed its side) would otherwise wait, with the stream
 * behind it, until the endpoint closes.  They stay in flight until then. */
void mpn_ucx_proxy_release_sends(mpn_ucx_peer_t* peer);

/** Any thread: a send of a communicator (one with its record,
 * cmd->mismatch) that could not be queued for lack of memory
 * (mpn_ucx_proxy_post failed).  Its receiver is told, as where UCX cannot
 * allocate a send (the record's hook sends the notice, on the proxy
 * thread), and the proxy refuses the sends to it that follow.  Once per
 * peer; allocates nothing.  Where the owner's close began (cmd->closing),
 * the peer is not told: the record is the owner's, freed by the close. */
void mpn_ucx_proxy_unsent(const mpn_ucx_cmd_t* cmd);

/** Proxy thread only, inside UCX's callbacks too (where the proxy may hold
 * the lock mpn_ucx_proxy_post takes: a close's drain progresses the
 * worker): queues a copy of cmd, started at the proxy's next round ahead
 * of the commands posted meanwhile. */
ncclResult_t mpn_ucx_proxy_post_later(const mpn_ucx_cmd_t* cmd);

/** Proxy thread only, outside UCX's callbacks (a mismatch's found): starts
 * the send cmd describes now, with its payload, bytes <= sizeof(desc_bytes),
 * copied into the command itself, so that it lives as long as the send. */
ncclResult_t mpn_ucx_proxy_send_here(const mpn_ucx_cmd_t* cmd, const void* payload, size_t bytes);

/** Proxy thread only, outside UCX's callbacks: starts a flush of
 * cmd->peer's endpoint now (one that has failed fails at once: start it
 * before mpn_ucx_proxy_fail_peer_receives).  Its completion (cmd->flag,
 * written whatever the status) comes once the operations started on the
 * endpoint before it are done at the peer too, or have failed: a notice
 * sent just before has arrived, or will not. */
ncclResult_t mpn_ucx_proxy_flush_here(const mpn_ucx_cmd_t* cmd);

/**
 * Cancels the operations of owner still in flight and tears its endpoints
 * down, on the proxy thread; returns when that is done.
 */
void mpn_ucx_proxy_close(const void* owner, mpn_ucx_peer_t* peers, int n);

/** Whether a close waits for the proxy to serve it (for tests). */
int mpn_ucx_proxy_close_pending(void);

/**
 * Stops the proxy thread's calls into UCX for good (done at the process's
 * exit, before UCX's own teardown); commands are no longer served, and a
 * close returns at once.  Waits up to timeout_ms for the thread to stop;
 * returns whether it has (0 where this process has no proxy thread).
 */
int mpn_ucx_proxy_park(int64_t timeout_ms);

/** How many rounds of its loop the proxy thread has made (for tests). */
uint64_t mpn_ucx_proxy_rounds(void);

#endif /* MPN_UCX_PROXY_H_ */
