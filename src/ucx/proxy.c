/*
 * proxy.c - UCX context, worker and the proxy thread.  The worker is created
 * single-threaded: only the proxy touches it.  Commands arrive through a
 * locked list; the proxy posts them (creating endpoints on first use), then
 * progresses the worker, sleeping briefly only when it has nothing in flight.
 * Operations in flight are listed, so that a peer UCX reports unreachable
 * (endpoint error handler, keepalive) fails its pending operations, and a
 * communicator going away cancels its own.  What a failure or a size
 * mismatch leads to (error words, how the peer is told) is in reports.c.
 */
#include "ucx/proxy.h"
#include "ucx/reports.h"
#include "ucx/ucx_config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/clock.h"
#include "core/proc.h"
#include "core/error.h"
#include "core/param.h"
#include "core/topo.h"

/* How long the process's exit waits for the proxy to stop calling UCX. */
#define PARK_AT_EXIT_MS 1000
/* How long mpn_ucx_proxy_pending waits for the proxy to answer: beyond a
 * close's drain of its operations (drain_owner, a second at most), which
 * the proxy may be in when asked. */
#define PENDING_ASK_NS 2000000000ull

static struct {
  pthread_once_t once;
  ncclResult_t status;
  ucp_context_h context;
  ucp_worker_h worker;
  ucp_address_t* address;
  size_t address_len;
  pthread_mutex_t lock;
  pthread_cond_t closed;
  mpn_ucx_cmd_t *head, *tail;
  mpn_ucx_cmd_t *armed, *armed_tail; /* waiting for their trigger, proxy thread only */
  long in_flight;  /* proxy thread only */
  long late;       /* receives of a peer that went, with a time to be cancelled at (proxy thread only) */
  mpn_ucx_cmd_t* flying;   /* operations in flight, proxy thread only */
  const void* closing_owner;
  mpn_ucx_peer_t* closing; /* endpoints to close, with n_closing */
  int n_closing, close_gen, closed_gen;
  pid_t pid;                 /* the process whose proxy thread runs (none in a child of fork) */
  int park, parked;          /* the proxy is to stop calling UCX (proxy_park); it has */
  int flush_fence;           /* UCX has no FENCE_MODE: its fence orders each lane only */
  mpn_ucx_cmd_t* fenced;     /* puts whose data is done, their signal to go (proxy thread only) */
  mpn_ucx_cmd_t *later, *later_tail; /* posted by the proxy thread itself (mpn_ucx_proxy_post_later) */
  uint64_t rounds;           /* of the proxy's loop (for tests) */
} px = {.once = PTHREAD_ONCE_INIT,
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .closed = PTHREAD_COND_INITIALIZER};

static void flying_add(mpn_ucx_cmd_t* cmd) {
  cmd->prev = NULL;
  cmd->next = px.flying;
  if (px.flying) px.flying->prev = cmd;
  px.flying = cmd;
}

static void flying_remove(mpn_ucx_cmd_t* cmd) {
  if (cmd->prev) cmd->prev->next = cmd->next;
  else if (px.flying == cmd) px.flying = cmd->next;
  if (cmd->next) cmd->next->prev = cmd->prev;
  cmd->next = cmd->prev = NULL;
  if (cmd->cancel_at_ns) px.late--; /* (late_sweep: counted while in flight) */
  cmd->cancel_at_ns = 0;
}

/* A completion inside the *_nbx call that posted cmd is noted for
 * execute(), which finishes it; 1 then. */
static int early_noted(mpn_ucx_cmd_t* cmd, ucs_status_t status) {
  if (!cmd->posting) return 0;
  cmd->early_done = 1;
  cmd->early_status = status;
  return 1;
}

static void complete(void* request, ucs_status_t status, void* user_data) {
  mpn_ucx_cmd_t* cmd = user_data;
  if (early_noted(cmd, status)) return;
  if (cmd->request) flying_remove(cmd);
  MPN_TRACE(MPN_SUBSYS_PROXY, "UCX %s tag %016llx done: %s", mpn_ucx_cmd_kind_name(cmd->kind),
            (unsigned long long)cmd->tag, ucs_status_string(status));
  if (status != UCS_OK) mpn_ucx_report_failure(cmd, status);
  if (status == UCS_OK && cmd->kind == MPN_UCX_RECV && cmd->fn) cmd->fn(cmd->arg);
  if (cmd->release == NULL) {
    __atomic_store_n(cmd->flag, cmd->value, __ATOMIC_RELEASE);
  } else { /* a pipeline's words only grow: a late completion must not undo a release */
    /* The release first: whoever sees this operation's flag sees the
     * pipeline released too. */
    for (int i = 0; status != UCS_OK && i < cmd->nrelease; i++)
      __atomic_store_n(&cmd->release[i], UINT64_MAX >> 1, __ATOMIC_RELEASE);
    uint64_t seen = __atomic_load_n(cmd->flag, __ATOMIC_ACQUIRE);
    while (seen < cmd->value &&
           !__atomic_compare_exchange_n(cmd->flag, &seen, cmd->value, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {}
  }
  if (cmd->pending) __atomic_sub_fetch(cmd->pending, 1, __ATOMIC_RELEASE); /* the caller's memory is its own again */
  px.in_flight--;
  free(cmd);
  if (request) ucp_request_free(request);
}

static void send_done(void* request, ucs_status_t status, void* user_data) {
  complete(request, status, user_data);
}

static void recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
  const mpn_ucx_cmd_t* cmd = user_data;
  mpn_ucx_came_t came = MPN_UCX_CAME_MORE;
  size_t got = 0;
  /* A message of another size than the receive expects is an error, not data. */
  int mismatch = mpn_ucx_report_came(cmd, status, info, &came, &got);
  if (mismatch) status = UCS_ERR_MESSAGE_TRUNCATED;
  if (mismatch && cmd->mismatch)
    mpn_ucx_report_mismatch(cmd, came, got);
  else if (mismatch && cmd->misfit)
    cmd->misfit(cmd->arg, came, got);
  complete(request, status, user_data);
}

/* Cancels the in-flight operations matching (owner, peer); NULL matches
 * all; receives only: the receives alone. */
static void cancel_matching(const void* owner, const mpn_ucx_peer_t* peer, int receives_only) {
  for (mpn_ucx_cmd_t *c = px.flying, *next; c; c = next) {
    next = c->next;
    if ((owner && c->owner != owner) || (peer && c->peer != peer) || (receives_only && c->kind != MPN_UCX_RECV))
      continue;
    ucp_request_cancel(px.worker, c->request); /* its callback runs with an error */
  }
}

/* UCX found the peer unreachable: fail everything that waits for it. */
static void peer_failed(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  mpn_ucx_peer_t* peer = arg;
  MPN_WARN("UCX: a peer became unreachable: %s", ucs_status_string(status));
  peer->failed = 1;
  peer->went = 1;
  __atomic_store_n(&peer->unreachable, 1, __ATOMIC_RELEASE); /* the watchdog fails its communicator */
  cancel_matching(NULL, peer, 0);
}

/* Whether a receive from cmd's peer, which failed by going away, finds its
 * message come before: UCX holds it among the unexpected ones, and a tag
 * receive needs no endpoint.  A sender that flushed and closed (it ended
 * its communicator, or exited) before this rank's stream reached the
 * receive failed nothing.  Not after a notice or a size mismatch: the
 * peer's messages are refused from then on. */
static int came_before_it_went(const mpn_ucx_cmd_t* cmd) {
  ucp_tag_recv_info_t info;
  return cmd->kind == MPN_UCX_RECV && cmd->peer->went && !cmd->peer->notified &&
         ucp_tag_probe_nb(px.worker, cmd->tag, ~(ucp_tag_t)cmd->last_bit, 0, &info) != NULL;
}

/* Receives of came_before_it_went whose message has not all come by their
 * time are cancelled (their callback fails them). */
static void late_sweep(void) {
  uint64_t now = mpn_clock_now_ns();
  for (mpn_ucx_cmd_t* c = px.flying; c; c = c->next)
    if (c->cancel_at_ns && now > c->cancel_at_ns) {
      c->cancel_at_ns = 0;
      px.late--;
      ucp_request_cancel(px.worker, c->request);
    }
}

static ucs_status_t ep_connect(mpn_ucx_peer_t* peer) {
  if (peer->failed) return UCS_ERR_UNREACHABLE;
  if (peer->ep) return UCS_OK;
  ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                          UCP_EP_PARAM_FIELD_ERR_HANDLER,
                            .address = peer->address,
                            .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                            .err_handler = {.cb = peer_failed, .arg = peer}};
  return ucp_ep_create(px.worker, &params, &peer->ep);
}

/* A request of UCX that nobody waits for: released when it completes. */
static ucs_status_t let_go(ucs_status_ptr_t req) {
  if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
  if (req) ucp_request_free(req);
  return UCS_OK;
}

static ucs_status_t key_of(ucp_ep_h ep, mpn_ucx_remote_t* r) {
  return r->rkey ? UCS_OK : ucp_ep_rkey_unpack(ep, r->packed, &r->rkey);
}

/* Words a late completion of a closed owner's operation writes instead of
 * the owner's, which are freed once the close returns (drain_owner). */
static uint64_t orphan_flag, orphan_release;
static int orphan_error, orphan_pending;

/* The flush of a put's data ended (fence_done, or at once in execute):
 * its signal goes in a later round of the proxy (execute counts it again),
 * unless its communicator closed meanwhile (drain_owner). */
static void fence_passed(mpn_ucx_cmd_t* cmd, ucs_status_t status) {
  if (status == UCS_OK && cmd->flag == &orphan_flag) status = UCS_ERR_CANCELED;
  if (status != UCS_OK) {
    complete(NULL, status, cmd);
    return;
  }
  cmd->fenced = 1;
  px.in_flight--;
  cmd->next = px.fenced;
  px.fenced = cmd;
}

static void fence_done(void* request, ucs_status_t status, void* user_data) {
  mpn_ucx_cmd_t* cmd = user_data;
  if (early_noted(cmd, status)) return;
  if (cmd->request) flying_remove(cmd);
  cmd->request = NULL;
  if (request) ucp_request_free(request);
  fence_passed(cmd, status);
}

/*
 * Put with signal: the data; then, with a signal, a fence, the descriptor
 * (if any) and a fence, and an atomic add of 1 to the peer's counter, so the
 * peer sees the count change only after the data and the descriptor; then a
 * flush of the endpoint, whose completion (everything remotely done) is the
 * command's.  Where UCX's fence orders each lane only (before FENCE_MODE,
 * UCX 1.14: a put split over several rails could land after the atomic),
 * the data and the descriptor are flushed instead, and the atomic goes once
 * that is done (cmd->fenced, fence_passed).  The peer's keys are unpacked
 * on first use.
 */
static ucs_status_ptr_t put_signal(mpn_ucx_cmd_t* cmd, const ucp_request_param_t* done) {
  ucp_ep_h ep = cmd->peer->ep;
  ucp_request_param_t plain = {.op_attr_mask = 0};
  ucs_status_t st = UCS_OK;
  int by_flush = px.flush_fence && cmd->signal;
  if (!cmd->fenced && mpn_ucx_report_signals_loss(cmd) && mpn_ucx_report_failed_before(cmd))
    mpn_ucx_report_put_lost(cmd, UCS_OK);
  if (cmd->bytes > 0 && !cmd->fenced) st = key_of(ep, cmd->dst);
  if (st == UCS_OK && cmd->bytes > 0 && !cmd->fenced)
    st = let_go(ucp_put_nbx(ep, cmd->buf, cmd->bytes, cmd->dst->addr + cmd->dst_offset, cmd->dst->rkey, &plain));
  if (st != UCS_OK && !cmd->fenced && mpn_ucx_report_signals_loss(cmd)) st = mpn_ucx_report_put_lost(cmd, st);
  if (st == UCS_OK && cmd->signal && !by_flush) st = ucp_worker_fence(px.worker);
  if (st == UCS_OK && cmd->signal && cmd->desc && !cmd->fenced) {
    st = key_of(ep, cmd->desc);
    if (st == UCS_OK)
      st = let_go(ucp_put_nbx(ep, cmd->desc_bytes, sizeof(cmd->desc_bytes), cmd->desc->addr + cmd->desc_offset,
                              cmd->desc->rkey, &plain));
    if (st == UCS_OK && !by_flush) st = ucp_worker_fence(px.worker);
  }
  if (st == UCS_OK && by_flush && !cmd->fenced) {
    ucp_request_param_t fence = *done;
    fence.cb.send = fence_done;
    cmd->fencing = 1;
    return ucp_ep_flush_nbx(ep, &fence);
  }
  ucp_request_param_t amo = {.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE, .datatype = ucp_dt_make_contig(8)};
  cmd->one = 1;
  if (st == UCS_OK && cmd->signal) st = key_of(ep, cmd->signal);
  if (st == UCS_OK && cmd->signal)
    st = let_go(ucp_atomic_op_nbx(ep, UCP_ATOMIC_OP_ADD, &cmd->one, 1,
                                  cmd->signal->addr + cmd->signal_offset, cmd->signal->rkey, &amo));
  if (st != UCS_OK) return UCS_STATUS_PTR(st);
  return ucp_ep_flush_nbx(ep, done);
}

/* Posts one command.  Receives also connect to their peer, so that a peer
 * that dies while we wait for it is noticed through its endpoint. */
static void execute(mpn_ucx_cmd_t* cmd) {
  MPN_TRACE(MPN_SUBSYS_PROXY, "UCX %s of %zu bytes, tag %016llx", mpn_ucx_cmd_kind_name(cmd->kind), cmd->bytes,
            (unsigned long long)cmd->tag);
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                               .user_data = cmd};
  ucs_status_ptr_t req;
  cmd->request = NULL;
  px.in_flight++;
  if (cmd->kind == MPN_UCX_CALL) {
    cmd->fn(cmd->arg);
    complete(NULL, UCS_OK, cmd);
    return;
  }
  if ((cmd->user_buffer && mpn_ucx_report_failed_before(cmd) && !mpn_ucx_report_signals_loss(cmd)) ||
      mpn_ucx_report_refused(cmd)) {
    complete(NULL, UCS_ERR_CANCELED, cmd);
    return;
  }
  ucs_status_t st = cmd->peer ? ep_connect(cmd->peer) : UCS_OK;
  int late = st != UCS_OK && came_before_it_went(cmd);
  if (st != UCS_OK && !late) {
    complete(NULL, st, cmd);
    return;
  }
  cmd->posting = 1;
  cmd->early_done = 0;
  if (cmd->kind == MPN_UCX_PUT_SIGNAL) {
    param.cb.send = send_done;
    req = put_signal(cmd, &param);
  } else if (cmd->kind == MPN_UCX_SEND) {
    param.cb.send = send_done;
    req = ucp_tag_send_nbx(cmd->peer->ep, cmd->buf, cmd->bytes, cmd->tag, &param);
  } else {
    /* A message that arrived before its receive would complete the receive
     * inside the call without the callback, and nothing would say how long
     * it was (UCX 1.13 leaves recv_info alone there): no immediate
     * completion, so recv_done always checks the length. */
    param.cb.recv = recv_done;
    param.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    req = ucp_tag_recv_nbx(px.worker, cmd->buf, cmd->bytes, cmd->tag, ~(ucp_tag_t)cmd->last_bit, &param);
  }
  cmd->posting = 0;
  if (cmd->fencing) { /* the flush before a signal (put_signal) */
    cmd->fencing = 0;
    if (cmd->early_done || req == NULL || UCS_PTR_IS_ERR(req)) {
      ucs_status_t status = cmd->early_done ? (ucs_status_t)cmd->early_status : UCS_PTR_STATUS(req);
      if (cmd->early_done && req && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);
      fence_passed(cmd, status);
    } else {
      cmd->request = req;
      flying_add(cmd);
    }
  } else if (cmd->early_done) {
    complete(req, (ucs_status_t)cmd->early_status, cmd);
  } else if (req == NULL) { /* sends and puts only (receives: see above) */
    complete(NULL, UCS_OK, cmd);
  } else if (UCS_PTR_IS_ERR(req)) {
    complete(NULL, UCS_PTR_STATUS(req), cmd);
  } else {
    cmd->request = req;
    flying_add(cmd);
    if (late) {
      cmd->cancel_at_ns = mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_NET_TIMEOUT) * 1000000000ull;
      px.late++;
    }
  }
}

static int triggered(const mpn_ucx_cmd_t* cmd) {
  return cmd->trigger == NULL || __atomic_load_n(cmd->trigger, __ATOMIC_ACQUIRE) >= cmd->trigger_value;
}

/* Commands whose trigger has not come wait in post order; those that are
 * due start in that order, so operations armed on one word keep theirs. */
static void arm(mpn_ucx_cmd_t* cmd) {
  cmd->next = NULL;
  if (px.armed_tail) px.armed_tail->next = cmd;
  else px.armed = cmd;
  px.armed_tail = cmd;
}

/* Whether an earlier command of c's staging lane (the same release words)
 * still waits: a lane's commands start in order, as a put's signal must
 * follow its earlier chunks (both words may come between two checks). */
static int lane_blocked(const mpn_ucx_cmd_t* kept, const mpn_ucx_cmd_t* c) {
  for (; c->release && kept; kept = kept->next)
    if (kept->release == c->release) return 1;
  return 0;
}

/* Walks the armed commands in order: starts those that are due, or, when
 * closing names an owner, fails that owner's (their trigger will never come).
 * The kept ones are armed again as the walk goes, so that a call run
 * in the sweep (mpn_ucx_proxy_pending's scan) finds in px.armed every one
 * kept before it: a list rebuilt aside and put back at the end left
 * px.armed naming the first command, which may have started (its next then
 * the in-flight list's) or been freed meanwhile. */
static void armed_sweep(const void* closing) {
  mpn_ucx_cmd_t* c = px.armed;
  px.armed = px.armed_tail = NULL;
  for (mpn_ucx_cmd_t* next; c; c = next) {
    next = c->next;
    if (closing ? c->owner == closing : triggered(c) && !lane_blocked(px.armed, c)) {
      if (closing) {
        px.in_flight++;
        complete(NULL, UCS_ERR_CANCELED, c);
      } else {
        execute(c);
      }
      continue;
    }
    arm(c);
  }
}

/* Force-closes p's endpoint: UCX completes the requests still on it with an
 * error (ucp_request_cancel reaches expected receives only, not sends, puts
 * or flushes).  Not from a UCX callback: it progresses the worker.  A lost
 * peer's endpoint is not closed when it is found lost: the remote keys
 * unpacked on it must go first (ucp_rkey_destroy), and its communicator
 * reports the loss (ncclRemoteError) and closes it on destroy or abort. */
static void ep_force_close(mpn_ucx_peer_t* p) {
  if (p->ep == NULL) return;
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE};
  ucs_status_ptr_t req = ucp_ep_close_nbx(p->ep, &param);
  while (req && !UCS_PTR_IS_ERR(req) && ucp_request_check_status(req) == UCS_INPROGRESS) ucp_worker_progress(px.worker);
  if (req && !UCS_PTR_IS_ERR(req)) ucp_request_free(req);
  p->ep = NULL;
}

/* Lets the owner's purged operations complete (their callbacks run from the
 * worker's progress), for at most a second; those still in flight then
 * write the proxy's own words when they end. */
static void drain_owner(const void* owner) {
  uint64_t deadline = mpn_clock_now_ns() + 1000000000ull;
  for (;;) {
    int left = 0;
    for (mpn_ucx_cmd_t* c = px.flying; c && !left; c = c->next) left = c->owner == owner;
    if (!left || mpn_clock_now_ns() > deadline) break;
    ucp_worker_progress(px.worker);
  }
  for (mpn_ucx_cmd_t* c = px.flying; c; c = c->next) {
    if (c->owner != owner) continue;
    c->flag = &orphan_flag;
    c->error = c->owner_error = &orphan_error;
    c->failure = NULL;
    c->pending = c->pending ? &orphan_pending : NULL;
    c->release = c->release ? &orphan_release : NULL;
    c->nrelease = c->release ? 1 : 0;
    c->fn = NULL;
    c->misfit = NULL;
    c->mismatch = NULL;
    c->quiet = 1;
    /* The owner and its peers are freed with the close: a communicator
     * made later at their addresses must not take these for its own (its
     * close would wait for them, its peer would never look idle). */
    c->owner = NULL;
    c->peer = NULL;
  }
}

/* Puts of a closing communicator whose signal has not gone: cancelled. */
static void fenced_drop(const void* owner) {
  for (mpn_ucx_cmd_t **p = &px.fenced, *c; (c = *p) != NULL;) {
    if (c->owner != owner) {
      p = &c->next;
      continue;
    }
    *p = c->next;
    px.in_flight++;
    complete(NULL, UCS_ERR_CANCELED, c);
  }
}

static void close_endpoints(void) {
  fenced_drop(px.closing_owner);
  armed_sweep(px.closing_owner);
  cancel_matching(px.closing_owner, NULL, 0);
  for (int i = 0; i < px.n_closing; i++) ep_force_close(&px.closing[i]);
  drain_owner(px.closing_owner);
  fenced_drop(px.closing_owner); /* (flushes that ended meanwhile) */
}

static char proxy_near[16]; /* PCI bus of the GPU served, "" for none */

/* Under px.lock, on the proxy thread: calls UCX no more, for good.  A close
 * waiting to be served is let go (mpn_ucx_proxy_close). */
static void park_here(void) {
  __atomic_store_n(&px.parked, 1, __ATOMIC_RELEASE);
  pthread_cond_broadcast(&px.closed);
  for (;;) pthread_cond_wait(&px.closed, &px.lock);
}

/* Commands taken from a queue: each starts now, or is armed behind those
 * armed before it, to keep the order. */
static void start_or_arm(mpn_ucx_cmd_t* cmds) {
  while (cmds) {
    mpn_ucx_cmd_t* next = cmds->next;
    if (px.armed == NULL && triggered(cmds))
      execute(cmds);
    else
      arm(cmds);
    cmds = next;
  }
}

static void* proxy_main(void* arg) {
  (void)arg;
  if (proxy_near[0]) {
    int bound = mpn_bind_thread_near_pci(proxy_near) == 0;
    MPN_INFO(MPN_SUBSYS_PROXY, "UCX proxy thread %s the CPUs nearest GPU %s",
             bound ? "bound to" : "could not be bound to", proxy_near);
  }
  for (;;) {
    pthread_mutex_lock(&px.lock);
    if (__atomic_load_n(&px.park, __ATOMIC_ACQUIRE)) park_here();
    mpn_ucx_cmd_t* cmds = px.head;
    px.head = px.tail = NULL;
    int closing = px.close_gen != px.closed_gen;
    pthread_mutex_unlock(&px.lock);
    mpn_ucx_cmd_t* fenced = px.fenced; /* signals whose puts are done: before newer commands */
    px.fenced = NULL;
    while (fenced) {
      mpn_ucx_cmd_t* next = fenced->next;
      fenced->next = NULL;
      execute(fenced);
      fenced = next;
    }
    mpn_ucx_cmd_t* later = px.later; /* (posted before the batch's commands, in the last round) */
    px.later = px.later_tail = NULL;
    start_or_arm(later);
    start_or_arm(cmds);
    if (closing) { /* the closer's commands were all in this batch: now armed or flying */
      pthread_mutex_lock(&px.lock);
      close_endpoints();
      mpn_ucx_report_drop(px.closing_owner);
      /* Cleared here, not by the closer: once served, a second closer may
       * already have put its own request in (it waits only for this). */
      px.closing = NULL;
      px.n_closing = 0;
      px.closing_owner = NULL;
      px.closed_gen = px.close_gen;
      pthread_cond_broadcast(&px.closed);
      pthread_mutex_unlock(&px.lock);
    }
    if (px.armed) armed_sweep(NULL);
    if (px.late) late_sweep();
    unsigned events = ucp_worker_progress(px.worker);
    __atomic_store_n(&px.rounds, px.rounds + 1, __ATOMIC_RELEASE);
    mpn_ucx_report_run();
    if (!events && px.in_flight == 0 && px.armed == NULL && px.fenced == NULL) usleep(50);
  }
  return NULL;
}

static void proxy_init(void) {
  ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                         .features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64};
  ucp_config_t* config = NULL;
  ucs_status_t st = mpn_ucx_config_read(&config, &px.flush_fence);
  if (st == UCS_OK) st = ucp_init(&params, config, &px.context);
  if (config) ucp_config_release(config);
  ucp_worker_params_t wparams = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                 .thread_mode = UCS_THREAD_MODE_SERIALIZED};
  if (st == UCS_OK) st = ucp_worker_create(px.context, &wparams, &px.worker);
  if (st == UCS_OK) st = ucp_worker_get_address(px.worker, &px.address, &px.address_len);
  if (st != UCS_OK) {
    px.status = mpn_error_set(NULL, ncclSystemError, "UCX could not start: %s", ucs_status_string(st));
    return;
  }
  int err = mpn_proc_thread_detached(proxy_main, NULL);
  if (err != 0)
    px.status = mpn_error_set(NULL, ncclSystemError, "cannot start the UCX proxy thread: %s", strerror(err));
  else
    __atomic_store_n(&px.pid, getpid(), __ATOMIC_RELEASE);
  MPN_INFO(MPN_SUBSYS_NET, "UCX proxy started, worker address %zu bytes", px.address_len);
}

ncclResult_t mpn_ucx_proxy_start(const char* near_pci, const void** address, size_t* len) {
  /* Only the first caller's GPU counts: one proxy serves the process. */
  static pthread_mutex_t first = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&first);
  if (near_pci && !proxy_near[0]) snprintf(proxy_near, sizeof(proxy_near), "%s", near_pci);
  pthread_mutex_unlock(&first);
  pthread_once(&px.once, proxy_init);
  if (px.status != ncclSuccess) return px.status;
  *address = px.address;
  *len = px.address_len;
  return ncclSuccess;
}

ucp_context_h mpn_ucx_proxy_context(void) { return px.context; }

/* A copy of cmd appended to the list (*head, *tail) (the caller holds what
 * guards it); 0 when out of memory. */
static int append_copy(mpn_ucx_cmd_t** head, mpn_ucx_cmd_t** tail, mpn_ucx_cmd_t* copy, const mpn_ucx_cmd_t* cmd) {
  if (copy == NULL) return 0;
  *copy = *cmd;
  copy->next = NULL;
  if (*tail)
    (*tail)->next = copy;
  else
    *head = copy;
  *tail = copy;
  return 1;
}

ncclResult_t mpn_ucx_proxy_post(const mpn_ucx_cmd_t* cmd) {
  mpn_ucx_cmd_t* copy = malloc(sizeof(*copy)); /* (outside the lock) */
  pthread_mutex_lock(&px.lock);
  int queued = append_copy(&px.head, &px.tail, copy, cmd);
  pthread_mutex_unlock(&px.lock);
  return queued ? ncclSuccess : mpn_error_set(NULL, ncclSystemError, "out of memory");
}

/* A call's state: the caller gives up on it only while it has not started,
 * so that once mpn_ucx_proxy_call returns, fn has run or never will (a
 * given-up call ran later, on a region mpn_ucx_region_free had freed). */
enum { CALL_QUEUED, CALL_RUNNING, CALL_ABANDONED };

typedef struct {
  void (*fn)(void*);
  void* arg;
  uint64_t done;
  int error;
  int state;
} call_t;

static void call_run(void* arg) {
  call_t* c = arg;
  int queued = CALL_QUEUED;
  if (__atomic_compare_exchange_n(&c->state, &queued, CALL_RUNNING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    c->fn(c->arg);
}

/* mpn_ucx_proxy_call, given up at deadline (clock ns) while not started. */
static ncclResult_t call_until(void (*fn)(void*), void* arg, uint64_t deadline) {
  /* On the heap: a call given up is left to the proxy, which still writes
   * its flag when it drops it; then it is leaked rather than freed under it. */
  call_t* c = calloc(1, sizeof(*c));
  if (c == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  *c = (call_t){.fn = fn, .arg = arg, .state = CALL_QUEUED};
  mpn_ucx_cmd_t cmd = {
      .kind = MPN_UCX_CALL, .fn = call_run, .arg = c, .flag = &c->done, .value = 1, .error = &c->error};
  ncclResult_t res = mpn_ucx_proxy_post(&cmd);
  while (res == ncclSuccess && __atomic_load_n(&c->done, __ATOMIC_ACQUIRE) != 1) {
    int queued = CALL_QUEUED;
    if (mpn_clock_now_ns() > deadline &&
        __atomic_compare_exchange_n(&c->state, &queued, CALL_ABANDONED, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return mpn_error_set(NULL, ncclInternalError, "the UCX proxy thread does not answer");
    usleep(20); /* past the deadline only while fn runs: it ends */
  }
  free(c);
  return res;
}

ncclResult_t mpn_ucx_proxy_call(void (*fn)(void*), void* arg) { return call_until(fn, arg, mpn_chan_deadline()); }

/* Whether one of cmds names peer. */
static int names_peer(const mpn_ucx_cmd_t* cmds, const mpn_ucx_peer_t* peer) {
  for (const mpn_ucx_cmd_t* c = cmds; c; c = c->next)
    if (c->peer == peer) return 1;
  return 0;
}

typedef struct {
  const mpn_ucx_peer_t* peer;
  int pending;
} pending_t;

/* On the proxy thread, after every command posted before the call: each
 * is in flight, armed, or a signal behind its fence by then, or done. */
static void pending_scan(void* arg) {
  pending_t* q = arg;
  q->pending = names_peer(px.flying, q->peer) || names_peer(px.armed, q->peer) || names_peer(px.fenced, q->peer) ||
               names_peer(px.later, q->peer);
}

int mpn_ucx_proxy_pending(const mpn_ucx_peer_t* peer) {
  pending_t q = {peer, 1};
  if (call_until(pending_scan, &q, mpn_clock_now_ns() + PENDING_ASK_NS) != ncclSuccess) return 1;
  return q.pending;
}

void mpn_ucx_proxy_fail_peer(mpn_ucx_peer_t* peer) {
  peer->failed = 1; /* later operations fail in ep_connect */
  cancel_matching(NULL, peer, 0);
}

void mpn_ucx_proxy_fail_peer_receives(mpn_ucx_peer_t* peer) {
  peer->failed = 1;
  peer->notified = 1;
  cancel_matching(NULL, peer, 1);
}

void mpn_ucx_proxy_release_sends(mpn_ucx_peer_t* peer) {
  for (mpn_ucx_cmd_t* c = px.flying; c; c = c->next) {
    if (c->peer != peer || c->kind == MPN_UCX_RECV) continue;
    int ok = ncclSuccess;
    if (c->error)
      __atomic_compare_exchange_n(c->error, &ok, (int)ncclRemoteError, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    for (int i = 0; i < c->nrelease; i++) __atomic_store_n(&c->release[i], UINT64_MAX >> 1, __ATOMIC_RELEASE);
    /* Without pipeline words (a captured group's send, graph.c): its own
     * flag, which the next replay waits for before reusing the staging. */
    if (c->release == NULL) __atomic_store_n(c->flag, c->value, __ATOMIC_RELEASE);
  }
}

/* Starts a copy of cmd now, on the proxy thread; the payload (NULL: none)
 * goes into the copy's desc_bytes. */
static ncclResult_t start_here(const mpn_ucx_cmd_t* cmd, const void* payload, size_t bytes) {
  mpn_ucx_cmd_t* copy = malloc(sizeof(*copy));
  if (copy == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  *copy = *cmd;
  if (payload) {
    memcpy(copy->desc_bytes, payload, bytes);
    copy->buf = copy->desc_bytes;
    copy->bytes = bytes;
  }
  copy->next = NULL;
  execute(copy);
  return ncclSuccess;
}

ncclResult_t mpn_ucx_proxy_post_later(const mpn_ucx_cmd_t* cmd) {
  if (append_copy(&px.later, &px.later_tail, malloc(sizeof(*cmd)), cmd)) return ncclSuccess;
  return mpn_error_set(NULL, ncclSystemError, "out of memory");
}

ncclResult_t mpn_ucx_proxy_send_here(const mpn_ucx_cmd_t* cmd, const void* payload, size_t bytes) {
  if (bytes > sizeof(cmd->desc_bytes))
    return mpn_error_set(NULL, ncclInternalError, "a proxy send of %zu bytes inline (at most %zu)", bytes,
                         sizeof(cmd->desc_bytes));
  mpn_ucx_cmd_t send = *cmd;
  send.kind = MPN_UCX_SEND;
  return start_here(&send, payload, bytes);
}

ncclResult_t mpn_ucx_proxy_flush_here(const mpn_ucx_cmd_t* cmd) {
  /* A put of nothing without a signal is the flush alone (put_signal). */
  mpn_ucx_cmd_t flush = *cmd;
  flush.kind = MPN_UCX_PUT_SIGNAL;
  flush.bytes = 0;
  flush.signal = NULL;
  return start_here(&flush, NULL, 0);
}

/* Posts fn(peer) on the proxy thread, nobody waiting for it.  Owned:
 * arriving with its communicator's close while other commands wait for
 * their trigger, it waits behind them, and unowned it would outlive the
 * close and use the freed peer; owned, the close drops it.  That loses
 * nothing (the close cancels what is left on peer), so it is quiet. */
static ncclResult_t peer_call_post(const void* owner, void (*fn)(void*), mpn_ucx_peer_t* peer) {
  static uint64_t done; /* nobody waits for it */
  mpn_ucx_cmd_t cmd = {
      .kind = MPN_UCX_CALL, .owner = owner, .fn = fn, .arg = peer, .flag = &done, .value = 1, .quiet = 1};
  return mpn_ucx_proxy_post(&cmd);
}

static void peer_lost(void* arg) {
  mpn_ucx_peer_t* peer = arg;
  peer->went = 1;
  mpn_ucx_proxy_fail_peer(peer);
}

ncclResult_t mpn_ucx_proxy_peer_lost(const void* owner, mpn_ucx_peer_t* peer) {
  return peer_call_post(owner, peer_lost, peer);
}

static void peer_watch(void* arg) {
  mpn_ucx_peer_t* peer = arg;
  ucs_status_t st = ep_connect(peer);
  if (st != UCS_OK)
    MPN_INFO(MPN_SUBSYS_NET, "UCX: no endpoint to a peer this rank waits for: %s", ucs_status_string(st));
}

ncclResult_t mpn_ucx_proxy_watch(const void* owner, mpn_ucx_peer_t* peer) {
  if (__atomic_exchange_n(&peer->watched, 1, __ATOMIC_ACQ_REL)) return ncclSuccess;
  return peer_call_post(owner, peer_watch, peer);
}

/* Whether this process runs the proxy thread.  Read without px.lock: a
 * child of fork may have been made while another thread held it. */
static int proxy_ours(void) { return __atomic_load_n(&px.pid, __ATOMIC_ACQUIRE) == getpid(); }

void mpn_ucx_proxy_close(const void* owner, mpn_ucx_peer_t* peers, int n) {
  /* (A child of fork has no proxy thread: nothing would serve the close.) */
  if (px.worker == NULL || !proxy_ours()) return;
  pthread_mutex_lock(&px.lock);
  /* One close at a time: wait for an earlier one to be served. */
  while (px.close_gen != px.closed_gen && !px.parked) pthread_cond_wait(&px.closed, &px.lock);
  if (px.parked) { /* (at the process's exit: nothing is served any more) */
    pthread_mutex_unlock(&px.lock);
    return;
  }
  px.closing_owner = owner;
  px.closing = peers;
  px.n_closing = n;
  int gen = ++px.close_gen;
  while (px.closed_gen < gen && !px.parked) pthread_cond_wait(&px.closed, &px.lock);
  pthread_mutex_unlock(&px.lock);
}

int mpn_ucx_proxy_park(int64_t timeout_ms) {
  if (!proxy_ours()) return 0;
  /* Not under px.lock either, which the proxy holds while it serves a
   * close (its waits are bounded, but longer than the exit should wait). */
  __atomic_store_n(&px.park, 1, __ATOMIC_RELEASE);
  uint64_t deadline = mpn_clock_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  while (!__atomic_load_n(&px.parked, __ATOMIC_ACQUIRE) && mpn_clock_now_ns() < deadline) usleep(50);
  return __atomic_load_n(&px.parked, __ATOMIC_ACQUIRE);
}

uint64_t mpn_ucx_proxy_rounds(void) { return __atomic_load_n(&px.rounds, __ATOMIC_ACQUIRE); }

/* At the process's exit UCX's own destructors, which run after this one
 * (the library depends on UCX's), take its event handlers down; a progress
 * call of the proxy meanwhile may find its interface's handler gone, and
 * UCX then ends the process ("failed to modify N event handler to
 * UCS_EVENT_SET_EVREAD", seen on the GPU machine).  So the proxy stops
 * calling UCX first.  Bounded: a proxy stuck in a call is left to the exit. */
__attribute__((destructor)) static void proxy_stop_at_exit(void) { mpn_ucx_proxy_park(PARK_AT_EXIT_MS); }

int mpn_ucx_proxy_close_pending(void) {
  pthread_mutex_lock(&px.lock);
  int pending = px.close_gen != px.closed_gen;
  pthread_mutex_unlock(&px.lock);
  return pending;
}
