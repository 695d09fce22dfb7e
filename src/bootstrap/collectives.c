/*
 * collectives.c - bootstrap contexts and the set-up collectives over the
 * channel: ring allgather, dissemination barrier, flat broadcast, split.
 * Each collective uses the context's sequence number as its tag, so
 * successive collectives never mix even when a peer runs ahead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "bootstrap/bootstrap.h"
#include "core/clock.h"
#include "core/error.h"

#define P2P_TAG_BIT 0x40000000

ncclResult_t mpn_bootstrap_create(uint64_t key, int nranks, int rank, const mpn_endpoint_t* eps,
                                  const volatile int* abort, mpn_bootstrap_t** out) {
  mpn_bootstrap_t* b = calloc(1, sizeof(*b));
  if (b == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  b->eps = malloc((size_t)nranks * sizeof(*eps));
  if (b->eps == NULL) {
    free(b);
    return mpn_error_set(NULL, ncclSystemError, "out of memory");
  }
  memcpy(b->eps, eps, (size_t)nranks * sizeof(*eps));
  b->key = key;
  b->rank = rank;
  b->nranks = nranks;
  b->abort = abort;
  b->left_by = -1;
  *out = b;
  return ncclSuccess;
}

void mpn_bootstrap_destroy(mpn_bootstrap_t* b) {
  if (b == NULL) return;
  /* Only this rank's own messages may be dropped; peers may still read theirs. */
  mpn_chan_forget(b->key, b->rank);
  free(b->eps);
  free(b);
}

static ncclResult_t send_to(mpn_bootstrap_t* b, int peer, int tag, const void* buf, size_t size) {
  return mpn_chan_send(b->key, b->rank, peer, &b->eps[peer], tag, buf, size);
}

static ncclResult_t recv_from(mpn_bootstrap_t* b, int peer, int tag, void* buf, size_t size) {
  ncclResult_t res = mpn_chan_recv(b->key, b->rank, peer, tag, buf, size, mpn_chan_deadline(), b->abort);
  if (res == ncclRemoteError && b->left_by < 0) b->left_by = mpn_chan_noticed(b->key, b->rank);
  return res;
}

/* A rank's entry in a split: the new context's members are listed by it. */
typedef struct {
  int color, key, rank;
} split_entry_t;

/* Tells ranks [0, n) but me of context key that me leaves its collectives
 * (res, and the thread's error text, say why); rank i lives at
 * eps[members[i].rank], or at eps[i] without members.  Best effort: the
 * thread's error text stays the failure's. */
static void notices_send(uint64_t key, int me, int n, const mpn_endpoint_t* eps, const split_entry_t* members,
                         ncclResult_t res, const volatile int* abort) {
  char why[512];
  snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
  ncclResult_t sent = ncclSuccess;
  for (int i = 0; i < n; i++) {
    if (i == me) continue;
    const mpn_endpoint_t* to = &eps[members ? members[i].rank : i];
    mpn_keep(&sent, mpn_chan_send(key, me, i, to, MPN_TAG_FAILED, why, strlen(why) + 1));
  }
  if (sent != ncclSuccess)
    MPN_WARN(
        "bootstrap: rank %d could not tell every peer that it left the set-up collectives (%s); those "
        "it missed wait until MPINCCL_BOOTSTRAP_TIMEOUT",
        me, mpn_error_last(NULL));
  (void)mpn_chan_flush(key, mpn_clock_now_ns() + MPN_CHAN_NOTICE_WAIT_NS, abort);
  if (strcmp(mpn_error_last(NULL), why) != 0) mpn_error_set(NULL, res, "%s", why);
}

ncclResult_t mpn_bootstrap_fail(mpn_bootstrap_t* b, ncclResult_t res) {
  if (b == NULL || b->left_by >= 0) return res;
  b->left_by = b->rank;
  MPN_INFO(MPN_SUBSYS_BOOTSTRAP, "bootstrap: rank %d leaves the set-up collectives of context %llx", b->rank,
           (unsigned long long)b->key);
  notices_send(b->key, b->rank, b->nranks, b->eps, NULL, res, b->abort);
  return res;
}

/* A context some rank left is out of step: its collectives fail at once,
 * as a misuse on the rank that left, as a peer's failure on the others. */
static ncclResult_t usable(const mpn_bootstrap_t* b) {
  if (b->left_by < 0) return ncclSuccess;
  return mpn_error_set(NULL, b->left_by == b->rank ? ncclInvalidUsage : ncclRemoteError,
                       "bootstrap: rank %d left the communicator's set-up collectives after failing in one; no "
                       "further one (window registration or deregistration, split) can run: destroy the "
                       "communicator",
                       b->left_by);
}

static int next_tag(mpn_bootstrap_t* b) { return (int)(b->seq++ & (P2P_TAG_BIT - 1)); }

/* Ends a collective: one that failed here, other than by an abort, leaves
 * the context out of step for this rank (a peer's message may come later
 * and would be taken for the next collective's), so this rank leaves it
 * and tells its peers.  An abort is the program's: it aborts the waits of
 * every rank alike (a split's, on the parent, whose later collectives then
 * still meet). */
static ncclResult_t collective_end(mpn_bootstrap_t* b, ncclResult_t res) {
  if (res == ncclSuccess) res = mpn_chan_flush(b->key, mpn_chan_deadline(), b->abort);
  if (res == ncclSuccess || (b->abort && *b->abort)) return res;
  return mpn_bootstrap_fail(b, res);
}

ncclResult_t mpn_bootstrap_allgather(mpn_bootstrap_t* b, void* buf, size_t size) {
  MPN_CHECK(usable(b));
  int tag = next_tag(b), n = b->nranks, right = (b->rank + 1) % n, left = (b->rank + n - 1) % n;
  char* data = buf;
  ncclResult_t res = ncclSuccess;
  for (int step = 0; step < n - 1 && res == ncclSuccess; step++) {
    int send_block = (b->rank - step + n) % n, recv_block = (b->rank - step - 1 + n) % n;
    res = send_to(b, right, tag, data + (size_t)send_block * size, size);
    if (res == ncclSuccess) res = recv_from(b, left, tag, data + (size_t)recv_block * size, size);
  }
  return collective_end(b, res);
}

ncclResult_t mpn_bootstrap_barrier(mpn_bootstrap_t* b) {
  MPN_CHECK(usable(b));
  int tag = next_tag(b), n = b->nranks;
  char token = 0;
  ncclResult_t res = ncclSuccess;
  for (int dist = 1; dist < n && res == ncclSuccess; dist <<= 1) {
    res = send_to(b, (b->rank + dist) % n, tag, &token, 1);
    if (res == ncclSuccess) res = recv_from(b, (b->rank - dist + n) % n, tag, &token, 1);
  }
  return collective_end(b, res);
}

ncclResult_t mpn_bootstrap_bcast(mpn_bootstrap_t* b, void* buf, size_t size, int root) {
  MPN_CHECK(usable(b));
  int tag = next_tag(b);
  ncclResult_t res = ncclSuccess;
  if (b->rank != root) return collective_end(b, recv_from(b, root, tag, buf, size));
  for (int peer = 0; peer < b->nranks && res == ncclSuccess; peer++)
    if (peer != root) res = send_to(b, peer, tag, buf, size);
  return collective_end(b, res);
}

ncclResult_t mpn_bootstrap_send(mpn_bootstrap_t* b, int peer, int tag, const void* buf,
                                size_t size) {
  MPN_CHECK(send_to(b, peer, P2P_TAG_BIT | (tag & (P2P_TAG_BIT - 1)), buf, size));
  return mpn_chan_flush(b->key, mpn_chan_deadline(), b->abort);
}

ncclResult_t mpn_bootstrap_recv(mpn_bootstrap_t* b, int peer, int tag, void* buf, size_t size) {
  return recv_from(b, peer, P2P_TAG_BIT | (tag & (P2P_TAG_BIT - 1)), buf, size);
}

/* Key of the child context: the same on every member, distinct per split. */
static uint64_t child_key(uint64_t parent, uint32_t split, int color) {
  uint64_t z = parent ^ (0x9e3779b97f4a7c15ull * (split + 1)) ^ ((uint64_t)(uint32_t)color << 17);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int split_order(const void* a, const void* b) {
  const split_entry_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

ncclResult_t mpn_bootstrap_split(mpn_bootstrap_t* parent, int color, int key, const volatile int* abort,
                                 mpn_bootstrap_t** out) {
  int n = parent->nranks;
  split_entry_t* all = calloc((size_t)n, sizeof(*all));
  if (all == NULL) return mpn_bootstrap_fail(parent, mpn_error_set(NULL, ncclSystemError, "out of memory"));
  all[parent->rank] = (split_entry_t){color < 0 ? -1 : color, key, parent->rank};
  /* The parent's context, watching the flag the caller names. */
  mpn_bootstrap_t view = *parent;
  if (abort) view.abort = abort;
  ncclResult_t res = mpn_bootstrap_allgather(&view, all, sizeof(*all));
  parent->seq = view.seq;
  parent->left_by = view.left_by;
  uint32_t split = parent->splits++;
  if (res != ncclSuccess || color < 0) {
    free(all);
    if (res == ncclSuccess) *out = NULL;
    return res;
  }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (all[i].color == color) all[m++] = all[i];
  qsort(all, (size_t)m, sizeof(*all), split_order);
  int my_rank = -1;
  for (int i = 0; i < m; i++)
    if (all[i].rank == parent->rank) my_rank = i;
  uint64_t child = child_key(parent->key, split, color);
  mpn_endpoint_t* eps = malloc((size_t)m * sizeof(*eps));
  res = eps ? ncclSuccess : mpn_error_set(NULL, ncclSystemError, "out of memory");
  for (int i = 0; i < m && eps; i++) eps[i] = parent->eps[all[i].rank];
  if (res == ncclSuccess) res = mpn_bootstrap_create(child, m, my_rank, eps, parent->abort, out);
  /* The new context's other members go on to its first collective. */
  if (res != ncclSuccess) notices_send(child, my_rank, m, parent->eps, all, res, parent->abort);
  free(eps);
  free(all);
  return res;
}

/* The buffers of mpn_bootstrap_from_mpi's MPI collectives, in one block. */
typedef struct {
  uint64_t key;
  mpn_endpoint_t self;
  mpn_endpoint_t eps[];
} from_mpi_t;

typedef struct {
  MPI_Comm comm;
  from_mpi_t* b;
  int bcast, err;
  MPI_Request req;
} from_mpi_start_t;

/* An MPI call handed over that never ran (mpn_chan_call returned ran). */
static ncclResult_t not_done(int ran, const volatile int* abort) {
  if (ran == MPN_CHAN_NO_MEMORY) return ncclSystemError; /* its text is set */
  if (abort && *abort) return mpn_error_set(NULL, ncclRemoteError, "mpincclCommInitMPI: aborted");
  return mpn_error_set(NULL, ncclInvalidUsage, "mpincclCommInitMPI: MPI was finalized during the set-up");
}

static void from_mpi_start(void* arg) {
  from_mpi_start_t* s = arg;
  from_mpi_t* b = s->b;
  s->err = s->bcast ? MPI_Ibcast(&b->key, 1, MPI_UINT64_T, 0, s->comm, &s->req)
                    : MPI_Iallgather(&b->self, (int)sizeof(b->self), MPI_BYTE, b->eps, (int)sizeof(b->self), MPI_BYTE,
                                     s->comm, &s->req);
}

/* Starts one of the set-up's collectives (on a thread that may call MPI,
 * mpn_chan_call) and waits for it; *started tells whether MPI holds a
 * request on b's buffers. */
static ncclResult_t from_mpi_step(MPI_Comm comm, from_mpi_t* b, int bcast, uint64_t deadline, const volatile int* abort,
                                  int* started) {
  from_mpi_start_t s = {.comm = comm, .b = b, .bcast = bcast, .err = MPI_SUCCESS};
  int ran = mpn_chan_call(from_mpi_start, &s, 0, abort);
  if (ran != 0) return not_done(ran, abort);
  if (s.err != MPI_SUCCESS) return mpn_error_mpi(s.err, bcast ? "MPI_Ibcast" : "MPI_Iallgather");
  *started = 1;
  MPN_CHECK(mpn_chan_mpi_wait(&s.req, deadline, abort));
  *started = 0;
  return ncclSuccess;
}

typedef struct {
  MPI_Comm comm;
  int inter, rank, size, err;
} comm_info_t;

static void comm_info(void* arg) {
  comm_info_t* c = arg;
  c->err = MPI_Comm_test_inter(c->comm, &c->inter);
  if (c->err == MPI_SUCCESS) c->err = MPI_Comm_rank(c->comm, &c->rank);
  if (c->err == MPI_SUCCESS) c->err = MPI_Comm_size(c->comm, &c->size);
}

ncclResult_t mpn_bootstrap_from_mpi(MPI_Comm comm, const volatile int* abort, mpn_bootstrap_t** out) {
  MPN_CHECK(mpn_chan_mpi_start(0));
  comm_info_t info = {.comm = comm, .err = MPI_SUCCESS};
  int ran = mpn_chan_call(comm_info, &info, 0, abort);
  if (ran != 0) return not_done(ran, abort);
  if (info.err != MPI_SUCCESS) return mpn_error_mpi(info.err, "MPI_Comm_test_inter/rank/size");
  if (info.inter)
    return mpn_error_set(NULL, ncclInvalidArgument,
                         "mpincclCommInitMPI: mpicomm is an inter-communicator");
  int rank = info.rank, size = info.size;
  from_mpi_t* b = calloc(1, sizeof(*b) + (size_t)size * sizeof(b->eps[0]));
  if (b == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  if (rank == 0 && getrandom(&b->key, sizeof(b->key), 0) != sizeof(b->key)) b->key = mpn_clock_now_ns();
  b->self = mpn_chan_self();
  uint64_t deadline = mpn_chan_deadline();
  int started = 0;
  ncclResult_t res = from_mpi_step(comm, b, 1, deadline, abort, &started);
  if (res == ncclSuccess) res = from_mpi_step(comm, b, 0, deadline, abort, &started);
  if (res == ncclSuccess) res = mpn_bootstrap_create(b->key, size, rank, b->eps, abort, out);
  if (started) {
    /* A wait that gave up (timeout, abort) leaves MPI a collective it cannot
     * cancel, which a late peer completes into b: b is kept for good. */
    MPN_WARN(
        "mpincclCommInitMPI: a set-up collective on the MPI communicator stays pending after "
        "this failure (MPI cannot cancel it); its buffers are kept, and the communicator "
        "should not be used for further collectives");
    return res;
  }
  free(b);
  return res;
}
