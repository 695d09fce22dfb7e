/*
 * rendezvous.c - unique ids and the rendezvous they name.
 *
 * The process that creates an id serves its rendezvous: every rank sends a
 * HELLO (rank, nranks, endpoint) to it; once nranks HELLOs are in, it checks
 * them and answers each with the table of all endpoints.  Whoever progresses
 * the channel in that process runs the service, so a creator that joins the
 * communicator needs no thread; a creator that does not join needs
 * MPI_THREAD_MULTIPLE, under which a helper thread serves open ids.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "core/clock.h"
#include "core/proc.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"

typedef struct {
  int32_t nranks, rank;
  uint64_t attempt; /* random, per call: its answer's tag (mpn_tag_table) */
  mpn_endpoint_t ep;
  int32_t status;   /* ncclResult_t: not ncclSuccess when the caller failed and will not join */
  int32_t withdraw; /* with a status: its earlier hello stands in this round; take it back */
  char error[160];  /* why, then */
} hello_t;

/* The answer to a caller: this head, then (status ncclSuccess) the table of
 * the nranks endpoints; an error is the head alone. */
typedef struct {
  int32_t status; /* ncclResult_t */
  uint32_t pad;
  uint64_t context; /* the round's context key: random, so that an id used again never repeats one */
  char error[192];
} table_head_t;

/* An id's state in the process serving it: while a round is open, and
 * while a failure lingers; freed then (record_idle), so that ids used up
 * hold nothing (DESIGN: bounded resources). */
typedef struct record {
  struct record* next;
  uint64_t key;
  int nranks, count, failed;
  ncclResult_t status; /* the failure's, for the callers answered with it */
  int max_nranks;      /* largest nranks any caller claimed */
  int answered;        /* callers answered since the id failed */
  uint64_t last_ns;    /* when the last caller arrived */
  hello_t* hellos;     /* count arrivals */
  char error[192];
} record_t;

static record_t* records; /* guarded by the channel lock */

#define OUT_OF_MEMORY "the process serving the unique id is out of memory"

/* How long a failed id answers late callers with its error after the last
 * caller came (MPINCCL_BOOTSTRAP_LINGER); then it may serve a new round. */
static uint64_t linger_ns(void) { return (uint64_t)mpn_param_int(MPN_PARAM_BOOTSTRAP_LINGER) * 1000000000ull; }

static uint64_t random64(void) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = mpn_clock_now_ns() ^ (uint64_t)getpid();
  return r;
}

static record_t* record_find(uint64_t key, int create) {
  for (record_t* r = records; r; r = r->next)
    if (r->key == key) return r;
  if (!create) return NULL;
  record_t* r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->key = key;
  r->next = records;
  records = r;
  return r;
}

/* Whether r has nothing left to do: no round open, and no failure that late
 * callers must still hear of (until MPINCCL_BOOTSTRAP_LINGER after the last
 * caller).  A caller after that starts afresh, as on an id never used. */
static int record_idle(const record_t* r, uint64_t now) {
  return r->count == 0 && (!r->failed || now - r->last_ns > linger_ns());
}

/* A failed id still owes its error to callers that may come late (ranks
 * some caller claimed and nobody has been answered for), until nobody came
 * for linger_ns: its process must go on serving it meanwhile. */
static int record_lingers(const record_t* r) {
  return r->failed && r->answered < r->max_nranks && mpn_clock_now_ns() - r->last_ns <= linger_ns();
}

/* Frees the records that have nothing left to do. */
static void records_sweep(void) {
  uint64_t now = mpn_clock_now_ns();
  for (record_t** pp = &records; *pp;) {
    record_t* r = *pp;
    if (record_idle(r, now)) {
      *pp = r->next;
      free(r->hellos);
      free(r);
    } else {
      pp = &r->next;
    }
  }
}

static void records_count(void* arg) {
  int n = 0;
  for (const record_t* r = records; r; r = r->next) n++;
  *(int*)arg = n;
}

int mpn_bootstrap_records_held(void) {
  int n = 0;
  mpn_chan_locked(records_count, &n);
  return n;
}

size_t mpn_bootstrap_table_bytes(int nranks) { return sizeof(table_head_t) + (size_t)nranks * sizeof(mpn_endpoint_t); }

/* Answers one caller with an error: the head alone, which needs no
 * allocation of a table. */
static void error_send(uint64_t key, const hello_t* h, ncclResult_t status, const char* error) {
  table_head_t head = {.status = status};
  snprintf(head.error, sizeof(head.error), "%s", error);
  (void)mpn_chan_send(key, MPN_RANK_SERVICE, h->rank, &h->ep, mpn_tag_table(h->attempt), &head, sizeof(head));
}

/* Sends the table, or status's error (r->error), to every rank that said
 * hello.  Out of memory for the table, they get that error instead of
 * waiting until MPINCCL_BOOTSTRAP_TIMEOUT.  Returns whether the table went out. */
static int table_send(const record_t* r, ncclResult_t status) {
  size_t len = mpn_bootstrap_table_bytes(r->nranks);
  char* msg = status == ncclSuccess ? calloc(1, len) : NULL;
  if (msg == NULL) {
    char why[sizeof(r->error)];
    snprintf(why, sizeof(why), "%s", r->error);
    if (status == ncclSuccess) {
      MPN_WARN("bootstrap: out of memory answering the %d callers of a unique id (%zu bytes)", r->count, len);
      snprintf(why, sizeof(why), OUT_OF_MEMORY " (%zu bytes for the table of %d ranks)", len, r->nranks);
      status = ncclSystemError;
    }
    for (int i = 0; i < r->count; i++) error_send(r->key, &r->hellos[i], status, why);
    return 0;
  }
  table_head_t* head = (table_head_t*)msg;
  mpn_endpoint_t* eps = (mpn_endpoint_t*)(msg + sizeof(*head));
  head->status = ncclSuccess;
  head->context = random64();
  for (int i = 0; i < r->count; i++) eps[r->hellos[i].rank] = r->hellos[i].ep;
  for (int i = 0; i < r->count; i++)
    mpn_chan_send(r->key, MPN_RANK_SERVICE, r->hellos[i].rank, &r->hellos[i].ep, mpn_tag_table(r->hellos[i].attempt),
                  msg, len);
  free(msg);
  return 1;
}

/* Answers the callers so far and ends the round, answered or not: a round
 * left open would take the next caller's hello past its full list.
 * Returns whether the table went out. */
static int record_answer(record_t* r, ncclResult_t status) {
  int sent = table_send(r, status);
  free(r->hellos);
  r->hellos = NULL;
  r->count = 0;
  return sent;
}

/* Checks a complete set of hellos: each rank exactly once. */
static ncclResult_t record_check(record_t* r) {
  char* seen = calloc((size_t)r->nranks, 1);
  if (seen == NULL) {
    snprintf(r->error, sizeof(r->error), OUT_OF_MEMORY);
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < r->count && res == ncclSuccess; i++) {
    if (seen[r->hellos[i].rank]++) {
      snprintf(r->error, sizeof(r->error), "rank %d was given by two callers of the same unique id",
               r->hellos[i].rank);
      res = ncclInvalidArgument;
    }
  }
  free(seen);
  return res;
}

/* A caller that failed before it could join (h->status, h->error): the
 * round fails, and every other caller, waiting or still to come, gets
 * ncclRemoteError naming it; the failed caller counts as answered. */
static void record_fail(record_t* r, const hello_t* h) {
  if (h->nranks > r->max_nranks) r->max_nranks = h->nranks;
  r->last_ns = mpn_clock_now_ns();
  r->answered++;
  if (r->failed) return; /* the first failure is the one the others hear of */
  snprintf(r->error, sizeof(r->error), "rank %d failed before it could join (%.*s)", h->rank,
           (int)strnlen(h->error, sizeof(h->error)), h->error);
  r->failed = 1;
  r->status = ncclRemoteError;
  if (r->count) {
    r->answered += r->count;
    record_answer(r, r->status);
  }
}

/* A caller that gave up its wait (abort, timeout) after its hello went in:
 * if that hello is in the open round, the round fails as with record_fail,
 * and its own answer goes to the caller with the others'.  If the round is
 * no longer open, the caller has its answer from it, and deals with it. */
static void record_withdraw(record_t* r, const hello_t* h) {
  int i = 0;
  while (i < r->count && r->hellos[i].attempt != h->attempt) i++;
  if (r->failed || i == r->count) return;
  r->last_ns = mpn_clock_now_ns();
  snprintf(r->error, sizeof(r->error), "rank %d left before the rendezvous was complete (%.*s)", h->rank,
           (int)strnlen(h->error, sizeof(h->error)), h->error);
  r->failed = 1;
  r->status = ncclRemoteError;
  r->answered += r->count;
  record_answer(r, r->status);
}

/* A caller's hello (h): it joins the open round, or gets the id's error.
 * Returns 1 when it completed a round that succeeded. */
static int record_join(record_t* r, const hello_t* h) {
  if (h->nranks > r->max_nranks) r->max_nranks = h->nranks;
  r->last_ns = mpn_clock_now_ns();
  if (r->count == 0 && !r->failed) {
    r->nranks = h->nranks;
    r->hellos = calloc((size_t)h->nranks, sizeof(hello_t));
  }
  if (!r->failed && h->nranks != r->nranks) {
    snprintf(r->error, sizeof(r->error), "callers of one unique id disagree on nranks (%d and %d)", r->nranks,
             h->nranks);
    r->failed = 1;
    r->status = ncclInvalidArgument;
  }
  if (!r->failed && r->hellos == NULL) { /* the round's list could not be made */
    error_send(r->key, h, ncclSystemError, OUT_OF_MEMORY);
    return 0;
  }
  if (r->failed) { /* this caller, and any still waiting, get the error */
    if (r->count) {
      r->answered += r->count;
      record_answer(r, r->status);
    }
    error_send(r->key, h, r->status, r->error);
    r->answered++;
    return 0;
  }
  r->hellos[r->count++] = *h;
  if (r->count < r->nranks) return 0;
  ncclResult_t res = record_check(r);
  if (res != ncclSuccess) { /* a caller still to come (a rank given twice) gets the error too */
    r->failed = 1;
    r->status = res;
    r->answered += r->count;
  }
  return record_answer(r, res);
}

static void service_served(uint64_t key);

void mpn_service_deliver(uint64_t key, const void* payload, size_t len) {
  hello_t h;
  if (len != sizeof(h)) return;
  memcpy(&h, payload, sizeof(h));
  records_sweep(); /* (a failed id whose linger is over starts afresh) */
  int withdraw = h.status != ncclSuccess && h.withdraw;
  record_t* r = record_find(key, !withdraw); /* (no record: no round open to withdraw from) */
  if (r == NULL) {
    if (h.status == ncclSuccess) error_send(key, &h, ncclSystemError, OUT_OF_MEMORY);
    return;
  }
  if (withdraw)
    record_withdraw(r, &h);
  else if (h.status != ncclSuccess) /* a caller that failed: it needs no answer */
    record_fail(r, &h);
  else if (record_join(r, &h))
    service_served(key);
  records_sweep();
}

/* ---- helper thread serving open ids under MPI_THREAD_MULTIPLE ---- */

typedef struct {
  uint64_t key, deadline; /* deadline: after it the id is still served, only polled less often */
} open_id_t;

/* How often the helper thread polls: while some id is younger than
 * MPINCCL_BOOTSTRAP_TIMEOUT, and once all are older (callers may come any
 * time later, after loading their data say: NCCL's root serves until
 * they do). */
enum { SERVICE_POLL_US = 200, SERVICE_IDLE_POLL_US = 2000 };

typedef struct {
  int remaining, young;
} service_state_t;

/* The helper thread: none runs; one is being started (by a creator that
 * does not know yet whether it will run); one runs (it says so at each
 * sweep while it has ids to serve). */
enum { SERVICE_NONE, SERVICE_STARTING, SERVICE_RUNNING };

static open_id_t* open_ids;
static int n_open, service_thread;

static void open_ids_remove(uint64_t key) {
  int j = 0;
  for (int i = 0; i < n_open; i++)
    if (open_ids[i].key != key) open_ids[j++] = open_ids[i];
  n_open = j;
}

/* A round of the id succeeded: the thread no longer serves it (a new round
 * is served by its callers' process as any id's). */
static void service_served(uint64_t key) { open_ids_remove(key); }

/* Keeps the ids not served yet, while MPI lasts (an id is served until a
 * round of it succeeds, or MPI is finalized, however late its callers
 * come): a failed id owes its error to late callers, and then serves a new
 * attempt by all ranks (README, Errors), whose round is open meanwhile. */
static void service_sweep(void* arg) {
  service_state_t* st = arg;
  records_sweep();
  uint64_t now = mpn_clock_now_ns();
  int j = 0, young = 0, ready = mpn_chan_mpi_ready();
  for (int i = 0; i < n_open && ready; i++) {
    const record_t* r = record_find(open_ids[i].key, 0);
    young |= now < open_ids[i].deadline || (r && now - r->last_ns < SERVICE_IDLE_POLL_US * 1000ull);
    open_ids[j++] = open_ids[i];
  }
  n_open = j;
  service_thread = n_open ? SERVICE_RUNNING : SERVICE_NONE;
  st->remaining = n_open;
  st->young = young;
}

static void* service_main(void* arg) {
  (void)arg;
  for (;;) {
    mpn_chan_progress();
    service_state_t st = {0, 0};
    mpn_chan_locked(service_sweep, &st);
    /* Served tables may still be on their way: deliver them before leaving. */
    if (st.remaining == 0 && !mpn_chan_sending()) return NULL;
    usleep(st.young ? SERVICE_POLL_US : SERVICE_IDLE_POLL_US);
  }
}

typedef struct {
  uint64_t key;
  int start, wait, no_memory;
} open_req_t;

/* For an id listed: whether its creator starts the thread (none runs), or
 * waits (another creator's start is under way, and may fail), or neither
 * (one runs, and serves the id). */
static void service_claim(void* arg) {
  open_req_t* req = arg;
  req->wait = service_thread == SERVICE_STARTING;
  req->start = service_thread == SERVICE_NONE;
  if (req->start) service_thread = SERVICE_STARTING;
}

static void service_open(void* arg) {
  open_req_t* req = arg;
  open_id_t* grown = realloc(open_ids, (size_t)(n_open + 1) * sizeof(*open_ids));
  if (grown == NULL) {
    req->no_memory = 1;
    return;
  }
  open_ids = grown;
  open_ids[n_open++] = (open_id_t){req->key, mpn_chan_deadline()};
  service_claim(req);
}

/* The helper thread did not start: the id (arg) is not served (its creator
 * refuses it), and none runs.  The ids listed meanwhile wait for this
 * outcome (service_claim), and one of them starts a thread now. */
static void service_unopen(void* arg) {
  open_ids_remove(*(const uint64_t*)arg);
  if (service_thread == SERVICE_STARTING) service_thread = SERVICE_NONE;
}

void mpn_service_after_fork(void) {
  free(open_ids);
  open_ids = NULL;
  n_open = 0;
  service_thread = SERVICE_NONE;
}

/* Lists the id for the helper thread; starts the thread if none runs.
 * Every id listed is served, or refused here. */
static ncclResult_t service_watch(uint64_t key) {
  open_req_t req = {.key = key};
  mpn_chan_locked(service_open, &req);
  if (req.no_memory)
    return mpn_error_set(NULL, ncclSystemError, "out of memory listing the unique id for the rendezvous thread");
  while (req.wait) {
    usleep(SERVICE_POLL_US);
    mpn_chan_locked(service_claim, &req);
  }
  if (!req.start) return ncclSuccess;
  int err = mpn_proc_thread_detached(service_main, NULL);
  if (err != 0) {
    mpn_chan_locked(service_unopen, &key);
    return mpn_error_set(NULL, ncclSystemError, "cannot start the rendezvous thread: %s",
                         strerror(err));
  }
  return ncclSuccess;
}

/* ---- ids and joining ---- */

static int use_mpi(void) {
  const char* mode = mpn_param_str(MPN_PARAM_BOOTSTRAP);
  if (strcasecmp(mode, "mpi") == 0) return 1;
  if (strcasecmp(mode, "local") == 0) return 0;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  return (inited && !finalized) || mpn_chan_launcher_rank() >= 0;
}

void mpn_bootstrap_id_create_local(mpn_bootstrap_id_t* id) {
  memset(id, 0, sizeof(*id));
  id->magic = MPN_BOOTSTRAP_ID_MAGIC;
  id->key = random64();
  id->root = mpn_chan_self();
  id->root.world = -1;
}

ncclResult_t mpn_bootstrap_id_create(mpn_bootstrap_id_t* id) {
  MPN_CHECK(mpn_params_load());
  mpn_bootstrap_id_t tmp;
  mpn_bootstrap_id_create_local(&tmp);
  if (use_mpi()) {
    tmp.flags |= MPN_BOOTSTRAP_ID_MPI;
    int inited = 0;
    MPI_Initialized(&inited);
    int launcher = mpn_chan_launcher_rank();
    if (!inited && launcher >= 0) {
      /* MPI_Init is collective in practice (the launcher's exchange at start),
       * so it waits until every process joins in ncclCommInitRank. */
      tmp.root.world = launcher;
    } else {
      MPN_CHECK(mpn_chan_mpi_start(1));
      tmp.root = mpn_chan_self();
      if (mpn_chan_mpi_thread_level() == MPI_THREAD_MULTIPLE) MPN_CHECK(service_watch(tmp.key));
    }
  }
  MPN_INFO(MPN_SUBSYS_BOOTSTRAP, "unique id %016llx served by %s (world rank %d)",
           (unsigned long long)tmp.key, tmp.flags & MPN_BOOTSTRAP_ID_MPI ? "MPI" : "this process",
           tmp.root.world);
  *id = tmp;
  return ncclSuccess;
}

typedef struct {
  uint64_t key;
  int done;
} linger_t;

static void linger_check(void* arg) {
  linger_t* l = arg;
  record_t* r = record_find(l->key, 0);
  l->done = r == NULL || !record_lingers(r);
}

/*
 * A failed rendezvous must still answer callers that arrive later, but the
 * creator's process serves them only while it progresses the channel: it
 * stays until every claimed rank was answered or nobody came for
 * MPINCCL_BOOTSTRAP_LINGER seconds, or until *abort (may be NULL) is set:
 * a destroy or abort of the creation waits for it.
 */
static void service_linger(uint64_t key, const volatile int* abort) {
  linger_t l = {key, 0};
  while (mpn_chan_locked(linger_check, &l), !l.done && !(abort && *abort)) {
    mpn_chan_progress();
    usleep(500);
  }
}

/* Reaches the id's serving process: MPI started when the id needs it. */
static ncclResult_t rendezvous_reach(const mpn_bootstrap_id_t* id) {
  if (id->magic != MPN_BOOTSTRAP_ID_MAGIC)
    return mpn_error_set(NULL, ncclInvalidArgument,
                         "the unique id was not made by ncclGetUniqueId (magic 0x%x)", id->magic);
  if (id->flags & MPN_BOOTSTRAP_ID_MPI) {
    MPN_CHECK(mpn_chan_mpi_start(1));
    int world = mpn_chan_world_size();
    if (id->root.world < 0 || id->root.world >= world) /* (an id of another job, or damaged) */
      return mpn_error_set(NULL, ncclInvalidArgument,
                           "the unique id names MPI_COMM_WORLD rank %d as its root, outside this job's %d ranks: "
                           "was it made by this job's ncclGetUniqueId?",
                           id->root.world, world);
  } else if (id->root.proc != mpn_chan_proc_id()) {
    return mpn_error_set(NULL, ncclInvalidUsage,
                         "the unique id was made in another process without MPI: start the "
                         "program with mpirun, or set MPINCCL_BOOTSTRAP=mpi");
  }
  return ncclSuccess;
}

/* Sends the rendezvous a hello that says this caller failed (res, and the
 * thread's error text, say why), and with withdraw that it takes back its
 * hello of that attempt; best effort: 0 when it could not. */
static int failed_hello_send(const mpn_bootstrap_id_t* id, int nranks, int rank, ncclResult_t res, int withdraw,
                             uint64_t attempt) {
  hello_t h = {
      .nranks = nranks, .rank = rank, .attempt = attempt, .ep = mpn_chan_self(), .status = res, .withdraw = withdraw};
  snprintf(h.error, sizeof(h.error), "%s", mpn_error_last(NULL));
  if (rendezvous_reach(id) != ncclSuccess ||
      mpn_chan_send(id->key, rank, MPN_RANK_SERVICE, &id->root, MPN_TAG_HELLO, &h, sizeof(h)) != ncclSuccess)
    return 0;
  (void)mpn_chan_flush(id->key, mpn_clock_now_ns() + MPN_CHAN_NOTICE_WAIT_NS, NULL);
  return 1;
}

void mpn_bootstrap_rendezvous_fail(const mpn_bootstrap_id_t* id, int nranks, int rank, ncclResult_t res) {
  char why[512];
  snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
  if (!failed_hello_send(id, nranks, rank, res, 0, 0))
    MPN_WARN(
        "bootstrap: rank %d could not tell the rendezvous that it failed (%s); the other ranks wait "
        "until MPINCCL_BOOTSTRAP_TIMEOUT",
        rank, mpn_error_last(NULL));
  if (strcmp(mpn_error_last(NULL), why) != 0) mpn_error_set(NULL, res, "%s", why);
}

/* Receives this call's answer into msg (len bytes at most), its length
 * into *got (an answer to an earlier call that its caller gave up waiting
 * for stays in the mailbox, never taken). */
static ncclResult_t table_recv(const mpn_bootstrap_id_t* id, int rank, uint64_t attempt, char* msg, size_t len,
                               size_t* got, uint64_t deadline_ns, const volatile int* abort) {
  return mpn_chan_recv_upto(id->key, rank, MPN_RANK_SERVICE, mpn_tag_table(attempt), msg, len, got, deadline_ns, abort);
}

/* The rendezvous's answer in msg (got bytes): this caller's context, or the
 * error (after which the id's own process serves late callers when it
 * lingers). */
static ncclResult_t table_read(const mpn_bootstrap_id_t* id, int nranks, int rank, const char* msg, size_t got,
                               int linger, const volatile int* abort, mpn_bootstrap_t** out) {
  table_head_t head;
  if (got < sizeof(head))
    return mpn_error_set(NULL, ncclInternalError, "bootstrap: the rendezvous answered rank %d with %zu bytes", rank,
                         got);
  memcpy(&head, msg, sizeof(head));
  if (head.status != ncclSuccess) {
    if (linger && id->root.proc == mpn_chan_proc_id()) service_linger(id->key, abort);
    return mpn_error_set(NULL, (ncclResult_t)head.status, "%.*s", (int)strnlen(head.error, sizeof(head.error)),
                         head.error);
  }
  if (got != mpn_bootstrap_table_bytes(nranks))
    return mpn_error_set(NULL, ncclInternalError,
                         "bootstrap: the rendezvous's table for rank %d has %zu bytes, expected %zu", rank, got,
                         mpn_bootstrap_table_bytes(nranks));
  return mpn_bootstrap_create(head.context, nranks, rank, (const mpn_endpoint_t*)(msg + sizeof(head)), abort, out);
}

/* This caller, which failed (res; why), leaves the round whose answer is
 * in msg: the members of a round that completed, gone on to the new
 * context's first collective, get a notice there that it left. */
static void round_leave(const mpn_bootstrap_id_t* id, int nranks, int rank, ncclResult_t res, const char* why,
                        const char* msg, size_t got) {
  mpn_bootstrap_t* b = NULL;
  if (table_read(id, nranks, rank, msg, got, 0, NULL, &b) != ncclSuccess) return;
  MPN_INFO(MPN_SUBSYS_BOOTSTRAP, "bootstrap: rank %d leaves a rendezvous that completed as it gave up", rank);
  mpn_error_set(NULL, res, "%s", why); /* the notice's reason */
  mpn_bootstrap_fail(b, res);
  mpn_bootstrap_destroy(b);
}

/*
 * A caller whose wait for its answer ended (abort, timeout) after its hello
 * went in takes the hello back, so that its peers need not wait for it until
 * their own deadline: an open round fails for every caller (record_withdraw);
 * a round already complete sent this caller its table (round_leave).  Best
 * effort, bounded by MPN_CHAN_NOTICE_WAIT_NS; the thread's error text stays
 * res's.
 */
static void rendezvous_withdraw(const mpn_bootstrap_id_t* id, int nranks, int rank, uint64_t attempt, ncclResult_t res,
                                char* msg, size_t len) {
  char why[512];
  snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
  size_t got = 0;
  if (failed_hello_send(id, nranks, rank, res, 1, attempt) &&
      table_recv(id, rank, attempt, msg, len, &got, mpn_clock_now_ns() + MPN_CHAN_NOTICE_WAIT_NS, NULL) == ncclSuccess)
    round_leave(id, nranks, rank, res, why, msg, got);
  else /* an answer that comes later is nobody's: dropped, not kept in the mailbox */
    mpn_chan_forget_tag(id->key, rank, mpn_tag_table(attempt));
  if (strcmp(mpn_error_last(NULL), why) != 0) mpn_error_set(NULL, res, "%s", why);
}

ncclResult_t mpn_bootstrap_rendezvous(const mpn_bootstrap_id_t* id, int nranks, int rank, const volatile int* abort,
                                      mpn_bootstrap_t** out) {
  MPN_CHECK(rendezvous_reach(id));
  hello_t h = {.nranks = nranks, .rank = rank, .attempt = random64(), .ep = mpn_chan_self(), .status = ncclSuccess};
  MPN_CHECK(mpn_chan_send(id->key, rank, MPN_RANK_SERVICE, &id->root, MPN_TAG_HELLO, &h, sizeof(h)));
  size_t len = mpn_bootstrap_table_bytes(nranks);
  char* msg = malloc(len);
  if (msg == NULL) {
    mpn_error_set(NULL, ncclSystemError, "out of memory (%zu bytes)", len);
    (void)failed_hello_send(id, nranks, rank, ncclSystemError, 1, h.attempt); /* its hello went in */
    mpn_chan_forget_tag(id->key, rank, mpn_tag_table(h.attempt));             /* (its answer, if one comes) */
    return mpn_error_set(NULL, ncclSystemError, "out of memory (%zu bytes)", len);
  }
  size_t got = 0;
  ncclResult_t res = table_recv(id, rank, h.attempt, msg, len, &got, mpn_chan_deadline(), abort);
  if (res == ncclSuccess && abort && *abort) { /* the answer came, but the caller was aborted meanwhile */
    res = mpn_error_set(NULL, ncclRemoteError, "bootstrap: rank %d aborted while waiting for the rendezvous", rank);
    char why[512];
    snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
    round_leave(id, nranks, rank, res, why, msg, got);
    mpn_error_set(NULL, res, "%s", why);
  } else if (res == ncclSuccess) {
    res = table_read(id, nranks, rank, msg, got, 1, abort, out);
  } else {
    rendezvous_withdraw(id, nranks, rank, h.attempt, res, msg, len);
  }
  free(msg);
  /* The tables this process served go out before it leaves the library. */
  if (res == ncclSuccess) res = mpn_chan_flush(id->key, mpn_chan_deadline(), abort);
  return res;
}
