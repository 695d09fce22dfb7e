/*
 * channel.c - mailbox and MPI progress of the bootstrap channel.
 *
 * All state sits behind one recursive lock.  MPI is only called with that lock
 * held and only through non-blocking calls (Isend, Improbe/Mrecv, Test), so
 * the library never blocks another thread's progress inside MPI.  Below
 * MPI_THREAD_MULTIPLE the threads the library starts for creation (workers)
 * never call MPI at all: their sends wait in a queue and their own MPI calls
 * are handed over as tasks, and the application's threads that call into
 * the library do both (mpn_chan_progress, mpn_chan_drive).  So MPI sees only
 * threads the application called the library from, one at a time.
 */
#define _GNU_SOURCE /* pthread_cond_clockwait */
#include "bootstrap/channel.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"

typedef struct {
  uint64_t key;
  int32_t src, dst, tag;
  uint32_t len;
} msg_hdr_t;

typedef struct msg {
  struct msg* next;
  msg_hdr_t hdr;
  char data[];
} msg_t;

typedef struct pending {
  struct pending* next;
  uint64_t key; /* context of the message, for mpn_chan_flush */
  MPI_Request req;
  int world, bytes; /* destination and length, for a send posted later */
  char buf[];
} pending_t;

/* An MPI call a worker hands over (mpn_chan_call); it lives on the worker's stack. */
typedef struct task {
  struct task* next;
  void (*fn)(void*);
  void* arg;
  int done; /* 1: fn ran; -1: it never will (MPI finalized) */
} task_t;

/* A split's MPI communicator whose free waits for a thread that may make it. */
typedef struct comm_free {
  struct comm_free* next;
  MPI_Comm comm;
} comm_free_t;

#define GONE_MAX 64
#define ANY_TAG INT32_MIN /* (no message has it) */

/* The latest GONE_MAX (key, dst, tag) forgotten; n counts them all. */
typedef struct {
  struct {
    uint64_t key;
    int32_t dst;
    int32_t tag; /* ANY_TAG: every message to dst */
  } at[GONE_MAX];
  unsigned n;
} gone_ring_t;

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  msg_t *head, *tail; /* mailbox, oldest first */
  pending_t* sends;   /* MPI sends not yet complete */
  pending_t *unposted, *unposted_tail; /* workers' sends, not yet given to MPI, oldest first */
  task_t *tasks, *tasks_tail;          /* workers' MPI calls, oldest first */
  /* Ranks of contexts that went away here (mpn_chan_forget), the latest:
   * keys are never used again, so a message to one that comes later (a
   * peer's failure notice) is dropped.  Answers whose callers gave up
   * (mpn_chan_forget_tag) have a ring of their own, so that many abandoned
   * calls cannot push a context out. */
  gone_ring_t gone_ranks, gone_answers;
  uint64_t proc;
  int mpi_ready, mpi_owned, thread_level, world_rank, world_size, tag;
  int workers;       /* live worker threads (atomic) */
  int mpi_inherited; /* a child of fork() of a process that used MPI: it may not */
} chan = {.cond = PTHREAD_COND_INITIALIZER};

/* Set on the threads the library starts for creation (mpn_chan_worker_begin). */
static __thread int chan_worker;

/* Whether this thread may call MPI itself. */
static int may_call_mpi(void) { return !chan_worker || chan.thread_level == MPI_THREAD_MULTIPLE; }

static pthread_once_t chan_once = PTHREAD_ONCE_INIT;

/* Random bits make the identity unique even across pid reuse and hosts. */
static uint64_t chan_proc_new(void) {
  uint64_t r = 0;
  if (getrandom(&r, sizeof(r), 0) != sizeof(r)) r = (uint64_t)mpn_clock_now_ns();
  return (r ^ ((uint64_t)getpid() << 32)) | 1;
}

static void chan_lock_init(void) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&chan.lock, &attr);
  pthread_mutexattr_destroy(&attr);
}

/*
 * Split communicators' MPI communicators whose destroy or abort came on a
 * thread that may not make MPI calls then (mpn_chan_comm_free): freed by
 * MPI's main thread when it next progresses the channel, or at
 * MPI_Finalize.  A lock of their own: a driver may hold the channel's
 * inside MPI_Comm_split, and a destroy must not wait for that.
 */
static comm_free_t* frees;
static pthread_mutex_t frees_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork() copies the locks as they are: one that another thread (the
 * rendezvous thread, say) held then stayed held for good in the child, and
 * the child's first call into the library blocked for ever.  So fork waits
 * until no other thread holds them, and the child starts with fresh ones. */
static void chan_before_fork(void) {
  pthread_mutex_lock(&chan.lock);
  pthread_mutex_lock(&frees_lock);
}

static void chan_after_fork_parent(void) {
  pthread_mutex_unlock(&frees_lock);
  pthread_mutex_unlock(&chan.lock);
}

/*
 * A child of fork() is another process: with its parent's identity it took
 * ids its parent made for its own and waited for a rendezvous nobody
 * served, instead of refusing them (rendezvous.c).  It has none of its
 * parent's other threads (workers, the rendezvous thread), nor, once its
 * parent used MPI, MPI: the parent's connections and pending messages are
 * not its own (mpn_chan_mpi_start refuses it).
 */
static void chan_after_fork_child(void) {
  chan_lock_init();
  pthread_mutex_init(&frees_lock, NULL);
  pthread_cond_init(&chan.cond, NULL);
  chan.proc = chan_proc_new();
  chan.mpi_inherited |= chan.mpi_ready;
  chan.mpi_ready = 0;
  /* The parent's sends, its workers' tasks and its communicators to free:
   * none of them is the child's to finish (their memory is left). */
  chan.sends = chan.unposted = chan.unposted_tail = NULL;
  chan.tasks = chan.tasks_tail = NULL;
  chan.workers = 0;
  frees = NULL;
  mpn_service_after_fork();
}

static void chan_init_once(void) {
  chan_lock_init();
  chan.proc = chan_proc_new();
  chan.world_rank = -1;
  pthread_atfork(chan_before_fork, chan_after_fork_parent, chan_after_fork_child);
}

static void chan_init(void) { pthread_once(&chan_once, chan_init_once); }

uint64_t mpn_chan_deadline(void) {
  return mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT) * 1000000000ull;
}

uint64_t mpn_chan_proc_id(void) {
  chan_init();
  return chan.proc;
}

mpn_endpoint_t mpn_chan_self(void) {
  chan_init();
  mpn_endpoint_t ep = {.proc = chan.proc, .world = chan.mpi_ready ? chan.world_rank : -1};
  return ep;
}

/* Read once: getenv is not safe beside a setenv of another thread (drivers and
 * MPI libraries call setenv while they start), so creation threads never read
 * the environment themselves; mpn_env_read_early() runs this first. */
static int launcher_rank = -1;
static pthread_once_t launcher_once = PTHREAD_ONCE_INIT;

static void launcher_read(void) {
  static const char* vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                               "MV2_COMM_WORLD_RANK"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
    const char* v = getenv(vars[i]);
    if (v && *v) {
      launcher_rank = atoi(v);
      return;
    }
  }
}

int mpn_chan_launcher_rank(void) {
  pthread_once(&launcher_once, launcher_read);
  return launcher_rank;
}

int mpn_chan_mpi_ready(void) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  int ready = chan.mpi_ready;
  pthread_mutex_unlock(&chan.lock);
  return ready;
}

int mpn_chan_mpi_thread_level(void) { return chan.thread_level; }
int mpn_chan_mpi_owned(void) { return chan.mpi_owned; }

void mpn_chan_locked(void (*fn)(void*), void* arg) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  fn(arg);
  pthread_mutex_unlock(&chan.lock);
}

/* Whether this thread may make the MPI calls of a destroy or abort: under
 * MPI_THREAD_MULTIPLE any, else MPI's main thread only (the application's
 * other threads may be in MPI calls of their own meanwhile). */
static int may_end_here(void) {
  int main_thread = 0;
  return __atomic_load_n(&chan.thread_level, __ATOMIC_ACQUIRE) == MPI_THREAD_MULTIPLE ||
         (MPI_Is_thread_main(&main_thread) == MPI_SUCCESS && main_thread);
}

/* The frees handed over, if this thread may make them (or finalizing). */
static void run_frees(int finalizing) {
  if (__atomic_load_n(&frees, __ATOMIC_ACQUIRE) == NULL || (!finalizing && !may_end_here())) return;
  pthread_mutex_lock(&frees_lock);
  comm_free_t* f = frees;
  frees = NULL;
  pthread_mutex_unlock(&frees_lock);
  while (f) {
    comm_free_t* next = f->next;
    MPI_Comm_free(&f->comm);
    free(f);
    f = next;
  }
}

void mpn_chan_comm_free(MPI_Comm* comm) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || *comm == MPI_COMM_NULL) return; /* (MPI_Finalize freed it) */
  if (may_end_here()) {
    MPI_Comm_free(comm);
    return;
  }
  comm_free_t* f = malloc(sizeof(*f));
  if (f == NULL) return; /* MPI_Finalize frees it */
  f->comm = *comm;
  pthread_mutex_lock(&frees_lock);
  f->next = frees;
  __atomic_store_n(&frees, f, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&frees_lock);
  *comm = MPI_COMM_NULL;
}

/* Completes or abandons outstanding sends; MPI is about to go away. */
static int chan_on_mpi_finalize(MPI_Comm comm, int keyval, void* attr, void* extra) {
  (void)comm, (void)keyval, (void)attr, (void)extra;
  pthread_mutex_lock(&chan.lock);
  uint64_t until = mpn_clock_now_ns() + 2000000000ull;
  while ((chan.sends || chan.unposted) && mpn_clock_now_ns() < until) mpn_chan_progress();
  for (pending_t *p = chan.sends, *next; p; p = next) {
    next = p->next;
    MPI_Cancel(&p->req);
    MPI_Request_free(&p->req);
    free(p);
  }
  for (pending_t *p = chan.unposted, *next; p; p = next) { /* (only if posting failed) */
    next = p->next;
    free(p);
  }
  chan.sends = chan.unposted = chan.unposted_tail = NULL;
  run_frees(1); /* (MPI works while it deletes MPI_COMM_SELF's attributes) */
  /* Workers' MPI calls not done by now never will be: they fail. */
  for (task_t *t = chan.tasks, *next; t; t = next) {
    next = t->next;
    t->done = -1;
  }
  chan.tasks = chan.tasks_tail = NULL;
  pthread_cond_broadcast(&chan.cond);
  __atomic_store_n(&chan.mpi_ready, 0, __ATOMIC_RELEASE); /* (mpn_chan_drive reads it without the lock) */
  pthread_mutex_unlock(&chan.lock);
  return MPI_SUCCESS;
}

static void chan_finalize_at_exit(void) {
  if (chan.mpi_inherited) return; /* a child of fork(): MPI is its parent's to finalize */
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

static ncclResult_t chan_hook_finalize(void) {
  int keyval;
  MPN_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, chan_on_mpi_finalize, &keyval, NULL));
  MPN_MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, NULL));
  return ncclSuccess;
}

static ncclResult_t chan_mpi_start_locked(int may_init) {
  if (chan.mpi_inherited)
    return mpn_error_set(NULL, ncclInvalidUsage,
                         "bootstrap: this process is a child of fork() of one that used MPI, which it may not use "
                         "(its parent's connections are not its own): ids made here need MPINCCL_BOOTSTRAP=local");
  int inited = 0, finalized = 0;
  MPN_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized)
    return mpn_error_set(NULL, ncclInvalidUsage,
                         "MPI is already finalized: communicators need MPI for their set-up");
  MPN_MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    if (!may_init)
      return mpn_error_set(NULL, ncclInvalidUsage, "MPI is not initialized and "
                                                   "MPINCCL_BOOTSTRAP does not allow starting it");
    MPN_MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &chan.thread_level));
    chan.mpi_owned = 1;
    atexit(chan_finalize_at_exit);
  } else {
    MPN_MPI_CHECK(MPI_Query_thread(&chan.thread_level));
  }
  MPN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &chan.world_rank));
  MPN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &chan.world_size));
  int launcher = mpn_chan_launcher_rank();
  if (launcher >= 0 && launcher != chan.world_rank)
    MPN_WARN("bootstrap: the launcher says world rank %d, MPI says %d; unique ids made before "
             "MPI started in this process will not work",
             launcher, chan.world_rank);
  MPN_CHECK(chan_hook_finalize());
  chan.tag = (int)mpn_param_int(MPN_PARAM_BOOTSTRAP_TAG);
  __atomic_store_n(&chan.mpi_ready, 1, __ATOMIC_RELEASE); /* after thread_level: mpn_chan_drive */
  MPN_INFO(MPN_SUBSYS_BOOTSTRAP, "MPI %s by %s, thread level %d, world rank %d, tag %d",
           chan.mpi_owned ? "initialized" : "found initialized",
           chan.mpi_owned ? "mpinccl" : "the application", chan.thread_level, chan.world_rank,
           chan.tag);
  return ncclSuccess;
}

ncclResult_t mpn_chan_mpi_start(int may_init) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  ncclResult_t res = chan.mpi_ready ? ncclSuccess : chan_mpi_start_locked(may_init);
  pthread_mutex_unlock(&chan.lock);
  return res;
}

static int ring_has(const gone_ring_t* r, uint64_t key, int dst, int tag) {
  unsigned n = r->n < GONE_MAX ? r->n : GONE_MAX;
  for (unsigned i = 0; i < n; i++)
    if (r->at[i].key == key && r->at[i].dst == dst && (r->at[i].tag == ANY_TAG || r->at[i].tag == tag)) return 1;
  return 0;
}

static int gone(uint64_t key, int dst, int tag) {
  return ring_has(&chan.gone_ranks, key, dst, tag) || ring_has(&chan.gone_answers, key, dst, tag);
}

/* Files a message: the service consumes HELLOs, the mailbox keeps the rest
 * but those to a context rank that went away. */
static void deposit(const msg_hdr_t* hdr, const void* data) {
  if (hdr->dst == MPN_RANK_SERVICE) {
    mpn_service_deliver(hdr->key, data, hdr->len);
    return;
  }
  if (gone(hdr->key, hdr->dst, hdr->tag)) {
    MPN_TRACE(MPN_SUBSYS_BOOTSTRAP,
              "bootstrap: dropped a message (tag %d) from rank %d to rank %d of context %llx, "
              "which went away",
              hdr->tag, hdr->src, hdr->dst, (unsigned long long)hdr->key);
    return;
  }
  msg_t* m = malloc(sizeof(*m) + hdr->len);
  if (m == NULL) {
    MPN_WARN("bootstrap: out of memory filing a %u-byte message", hdr->len);
    return;
  }
  m->next = NULL;
  m->hdr = *hdr;
  memcpy(m->data, data, hdr->len);
  if (chan.tail) chan.tail->next = m;
  else chan.head = m;
  chan.tail = m;
  pthread_cond_broadcast(&chan.cond);
}

/* Gives p to MPI; on failure frees it and returns MPI's error. */
static int post(pending_t* p) {
  int err = MPI_Isend(p->buf, p->bytes, MPI_BYTE, p->world, chan.tag, MPI_COMM_WORLD, &p->req);
  if (err != MPI_SUCCESS) {
    free(p);
    return err;
  }
  p->next = chan.sends;
  chan.sends = p;
  return MPI_SUCCESS;
}

/* Posts the workers' sends in the order they were made (a driver's). */
static void post_unposted(void) {
  while (chan.unposted) {
    pending_t* p = chan.unposted;
    chan.unposted = p->next;
    if (chan.unposted == NULL) chan.unposted_tail = NULL;
    int world = p->world;
    int err = post(p);
    if (err != MPI_SUCCESS) {
      mpn_error_mpi(err, "MPI_Isend");
      MPN_WARN("bootstrap: a set-up message to world rank %d was lost (%s); its receiver will time out", world,
               mpn_error_last(NULL));
    }
  }
}

ncclResult_t mpn_chan_send(uint64_t key, int src, int dst, const mpn_endpoint_t* to, int tag,
                           const void* buf, size_t len) {
  chan_init();
  if (len > INT_MAX - sizeof(msg_hdr_t)) /* MPI counts are ints */
    return mpn_error_set(NULL, ncclInvalidArgument, "bootstrap: a message of %zu bytes is too long", len);
  msg_hdr_t hdr = {.key = key, .src = src, .dst = dst, .tag = tag, .len = (uint32_t)len};
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&chan.lock);
  if (to->proc == chan.proc) {
    deposit(&hdr, buf);
  } else if (!chan.mpi_ready || to->world < 0) {
    res = mpn_error_set(NULL, ncclInvalidUsage,
                        "bootstrap: rank %d lives in another process but MPI is not available "
                        "to reach it",
                        dst);
  } else if (to->world >= chan.world_size) { /* MPI_Isend would abort the job */
    res = mpn_error_set(NULL, ncclInvalidArgument,
                        "bootstrap: rank %d is said to be MPI_COMM_WORLD rank %d, outside this job's %d ranks", dst,
                        to->world, chan.world_size);
  } else {
    pending_t* p = malloc(sizeof(*p) + sizeof(hdr) + len);
    if (p == NULL) {
      res = mpn_error_set(NULL, ncclSystemError, "bootstrap: out of memory sending %zu bytes", len);
    } else {
      memcpy(p->buf, &hdr, sizeof(hdr));
      memcpy(p->buf + sizeof(hdr), buf, len);
      p->key = key;
      p->world = to->world;
      p->bytes = (int)(sizeof(hdr) + len);
      p->next = NULL;
      if (may_call_mpi() && chan.unposted == NULL) {
        int err = post(p);
        if (err != MPI_SUCCESS) res = mpn_error_mpi(err, "MPI_Isend");
      } else { /* after the queued ones, so that messages keep their order */
        if (chan.unposted_tail)
          chan.unposted_tail->next = p;
        else
          chan.unposted = p;
        chan.unposted_tail = p;
        if (may_call_mpi()) post_unposted();
      }
    }
  }
  pthread_mutex_unlock(&chan.lock);
  return res;
}

/* Runs the workers' tasks, oldest first, and wakes them. */
static void run_tasks(void) {
  if (chan.tasks == NULL) return;
  while (chan.tasks) {
    task_t* t = chan.tasks;
    chan.tasks = t->next;
    if (chan.tasks == NULL) chan.tasks_tail = NULL;
    t->fn(t->arg);
    t->done = 1;
  }
  pthread_cond_broadcast(&chan.cond);
}

void mpn_chan_progress(void) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  if (!chan.mpi_ready || !may_call_mpi()) { /* a worker below MPI_THREAD_MULTIPLE: a driver will */
    pthread_mutex_unlock(&chan.lock);
    return;
  }
  post_unposted(); /* before the tasks: one may block (MPI_Comm_split) */
  run_tasks();
  run_frees(0);
  for (pending_t **pp = &chan.sends; *pp;) {
    int done = 0;
    MPI_Test(&(*pp)->req, &done, MPI_STATUS_IGNORE);
    if (done) {
      pending_t* p = *pp;
      *pp = p->next;
      free(p);
    } else {
      pp = &(*pp)->next;
    }
  }
  for (;;) {
    int found = 0, bytes = 0;
    MPI_Message mh;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, chan.tag, MPI_COMM_WORLD, &found, &mh, &st) != MPI_SUCCESS ||
        !found)
      break;
    MPI_Get_count(&st, MPI_BYTE, &bytes);
    char* buf = malloc(bytes > 0 ? (size_t)bytes : 1);
    if (buf == NULL || MPI_Mrecv(buf, bytes, MPI_BYTE, &mh, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      MPN_WARN("bootstrap: lost a %d-byte message from world rank %d", bytes, st.MPI_SOURCE);
      free(buf);
      continue;
    }
    msg_hdr_t hdr;
    if ((size_t)bytes >= sizeof(hdr)) {
      memcpy(&hdr, buf, sizeof(hdr));
      if (hdr.len == (size_t)bytes - sizeof(hdr)) deposit(&hdr, buf + sizeof(hdr));
      else MPN_WARN("bootstrap: malformed message from world rank %d", st.MPI_SOURCE);
    }
    free(buf);
  }
  pthread_mutex_unlock(&chan.lock);
}

/* Takes t off the queue of tasks (it has not started: drivers run tasks
 * holding the lock, which the caller holds). */
static void task_unqueue(task_t* t) {
  task_t* prev = NULL;
  for (task_t* q = chan.tasks; q; prev = q, q = q->next) {
    if (q != t) continue;
    if (prev)
      prev->next = q->next;
    else
      chan.tasks = q->next;
    if (chan.tasks_tail == q) chan.tasks_tail = prev;
    return;
  }
}

/* Runs fn(arg) on a thread that may call MPI: this one, or (a worker below
 * MPI_THREAD_MULTIPLE) the next driver, waiting for it.  Lock held once.
 * Returns 0 once fn ran, else MPN_CHAN_NOT_RUN or MPN_CHAN_NO_MEMORY (as
 * mpn_chan_call). */
static int run_locked(void (*fn)(void*), void* arg, const volatile int* abort) {
  if (!chan.mpi_ready) return MPN_CHAN_NOT_RUN;
  if (may_call_mpi()) {
    fn(arg);
    return 0;
  }
  /* On the heap: the queue is global, and every way out of the wait
   * below leaves the task off it (run_tasks, task_unqueue, finalize). */
  task_t* t = calloc(1, sizeof(*t));
  if (t == NULL) {
    mpn_error_set(NULL, ncclSystemError, "bootstrap: out of memory handing an MPI call to the thread that drives MPI");
    return MPN_CHAN_NO_MEMORY;
  }
  t->fn = fn;
  t->arg = arg;
  if (chan.tasks_tail)
    chan.tasks_tail->next = t;
  else
    chan.tasks = t;
  chan.tasks_tail = t;
  while (!t->done) {
    if (abort && *abort) {
      task_unqueue(t);
      free(t);
      return MPN_CHAN_NOT_RUN;
    }
    struct timespec ts = mpn_clock_after(1000000);
    pthread_cond_clockwait(&chan.cond, &chan.lock, CLOCK_MONOTONIC, &ts);
  }
  int ran = t->done > 0;
  free(t);
  return ran ? 0 : MPN_CHAN_NOT_RUN;
}

int mpn_chan_call(void (*fn)(void*), void* arg, int blocks, const volatile int* abort) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  int multiple = chan.mpi_ready && chan.thread_level == MPI_THREAD_MULTIPLE;
  if (blocks && multiple) { /* others go on meanwhile */
    pthread_mutex_unlock(&chan.lock);
    fn(arg);
    return 0;
  }
  int ran = run_locked(fn, arg, abort);
  pthread_mutex_unlock(&chan.lock);
  return ran;
}

void mpn_chan_worker_begin(void) {
  chan_worker = 1;
  mpn_error_mpi_strings(may_call_mpi()); /* (MPI_Error_string is an MPI call too) */
  __atomic_add_fetch(&chan.workers, 1, __ATOMIC_ACQ_REL);
}

void mpn_chan_worker_end(void) {
  if (!chan_worker) return;
  chan_worker = 0;
  mpn_error_mpi_strings(1);
  __atomic_sub_fetch(&chan.workers, 1, __ATOMIC_ACQ_REL);
}

void mpn_chan_drive(mpn_chan_drive_t how) {
  /* Also with no worker left: one may have left sends behind (an error path). */
  if (chan_worker ||
      (__atomic_load_n(&chan.workers, __ATOMIC_ACQUIRE) == 0 &&
       __atomic_load_n(&chan.unposted, __ATOMIC_RELAXED) == NULL && __atomic_load_n(&frees, __ATOMIC_ACQUIRE) == NULL))
    return;
  chan_init();
  /* (read without the lock, which a driver may hold in MPI_Comm_split: a
   * poll must not wait for it) */
  int ready = __atomic_load_n(&chan.mpi_ready, __ATOMIC_ACQUIRE),
      level = __atomic_load_n(&chan.thread_level, __ATOMIC_ACQUIRE);
  if (!ready || level == MPI_THREAD_MULTIPLE) return; /* workers call MPI themselves, or MPI is gone */
  if (how != MPN_CHAN_DRIVE_CREATE && level < MPI_THREAD_SERIALIZED) {
    int main_thread = 0;
    if (MPI_Is_thread_main(&main_thread) != MPI_SUCCESS || !main_thread) return;
  }
  if (how == MPN_CHAN_DRIVE_POLL) {
    if (pthread_mutex_trylock(&chan.lock) != 0) return;
    mpn_chan_progress();
    pthread_mutex_unlock(&chan.lock);
    return;
  }
  mpn_chan_progress();
}

/* Unlinks and returns the oldest matching message, or NULL. */
static msg_t* take(uint64_t key, int dst, int src, int tag) {
  msg_t* prev = NULL;
  for (msg_t* m = chan.head; m; prev = m, m = m->next) {
    if (m->hdr.key != key || m->hdr.dst != dst || m->hdr.src != src || m->hdr.tag != tag) continue;
    if (prev) prev->next = m->next;
    else chan.head = m->next;
    if (chan.tail == m) chan.tail = prev;
    return m;
  }
  return NULL;
}

/* The first failure notice to dst of context key, left filed; or NULL. */
static const msg_t* notice(uint64_t key, int dst) {
  for (const msg_t* m = chan.head; m; m = m->next)
    if (m->hdr.key == key && m->hdr.dst == dst && m->hdr.tag == MPN_TAG_FAILED) return m;
  return NULL;
}

int mpn_chan_noticed(uint64_t key, int dst) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  const msg_t* m = notice(key, dst);
  int src = m ? m->hdr.src : -1;
  pthread_mutex_unlock(&chan.lock);
  return src;
}

/* mpn_chan_recv, or with got mpn_chan_recv_upto. */
static ncclResult_t chan_recv(uint64_t key, int dst, int src, int tag, void* buf, size_t len, size_t* got,
                              uint64_t deadline_ns, const volatile int* abort) {
  chan_init();
  uint64_t wait_ns = 20000; /* grows to 1 ms while nothing arrives */
  pthread_mutex_lock(&chan.lock);
  for (;;) {
    msg_t* m = take(key, dst, src, tag);
    if (m == NULL) {
      mpn_chan_progress();
      m = take(key, dst, src, tag);
    }
    if (m) {
      pthread_mutex_unlock(&chan.lock);
      ncclResult_t res = ncclSuccess;
      if (got ? m->hdr.len > len : m->hdr.len != len)
        res = mpn_error_set(NULL, ncclInternalError, "bootstrap: message from rank %d has %u bytes, expected %s%zu",
                            src, m->hdr.len, got ? "at most " : "", len);
      else
        memcpy(buf, m->data, m->hdr.len);
      if (got) *got = m->hdr.len;
      free(m);
      return res;
    }
    const msg_t* failed = notice(key, dst);
    if (failed) {
      int from = failed->hdr.src;
      char why[256];
      snprintf(why, sizeof(why), "%.*s", (int)strnlen(failed->data, failed->hdr.len), failed->data);
      pthread_mutex_unlock(&chan.lock);
      return mpn_error_set(NULL, ncclRemoteError,
                           "bootstrap: rank %d failed in a set-up step of the communicator that rank %d waited "
                           "for, and left its set-up collectives (%s)",
                           from, dst, why);
    }
    if (abort && *abort) {
      pthread_mutex_unlock(&chan.lock);
      if (src == MPN_RANK_SERVICE)
        return mpn_error_set(NULL, ncclRemoteError, "bootstrap: rank %d aborted while waiting for the rendezvous", dst);
      return mpn_error_set(NULL, ncclRemoteError, "bootstrap: aborted while waiting for rank %d",
                           src);
    }
    uint64_t now = mpn_clock_now_ns();
    if (now >= deadline_ns) {
      pthread_mutex_unlock(&chan.lock);
      if (src == MPN_RANK_SERVICE)
        return mpn_error_set(NULL, ncclTimeout,
                             "bootstrap: rank %d got no answer from the rendezvous within %lld s "
                             "(MPINCCL_BOOTSTRAP_TIMEOUT): are all ranks calling in, and is the "
                             "process that called ncclGetUniqueId taking part, or did it "
                             "initialize MPI with MPI_THREAD_MULTIPLE before making the id?",
                             dst, (long long)mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT));
      return mpn_error_set(NULL, ncclTimeout,
                           "bootstrap: rank %d waited %lld s for rank %d "
                           "(MPINCCL_BOOTSTRAP_TIMEOUT)",
                           dst, (long long)mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT), src);
    }
    struct timespec ts = mpn_clock_after(wait_ns);
    pthread_cond_clockwait(&chan.cond, &chan.lock, CLOCK_MONOTONIC, &ts);
    if (wait_ns < 1000000) wait_ns *= 2;
  }
}

ncclResult_t mpn_chan_recv(uint64_t key, int dst, int src, int tag, void* buf, size_t len, uint64_t deadline_ns,
                           const volatile int* abort) {
  return chan_recv(key, dst, src, tag, buf, len, NULL, deadline_ns, abort);
}

ncclResult_t mpn_chan_recv_upto(uint64_t key, int dst, int src, int tag, void* buf, size_t len, size_t* got,
                                uint64_t deadline_ns, const volatile int* abort) {
  return chan_recv(key, dst, src, tag, buf, len, got, deadline_ns, abort);
}

/* Under the lock: messages to (key, dst) of tag (ANY_TAG: all) are dropped,
 * those in the mailbox now and those that come later. */
static void forget_locked(uint64_t key, int dst, int tag) {
  gone_ring_t* r = tag == ANY_TAG ? &chan.gone_ranks : &chan.gone_answers;
  r->at[r->n % GONE_MAX].key = key;
  r->at[r->n % GONE_MAX].dst = dst;
  r->at[r->n % GONE_MAX].tag = tag;
  r->n++;
  msg_t *m = chan.head, *prev = NULL;
  while (m) {
    msg_t* next = m->next;
    if (m->hdr.key == key && m->hdr.dst == dst && (tag == ANY_TAG || m->hdr.tag == tag)) {
      if (prev) prev->next = next;
      else chan.head = next;
      if (chan.tail == m) chan.tail = prev;
      free(m);
    } else {
      prev = m;
    }
    m = next;
  }
}

void mpn_chan_forget_tag(uint64_t key, int dst, int tag) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  forget_locked(key, dst, tag);
  pthread_mutex_unlock(&chan.lock);
}

void mpn_chan_forget(uint64_t key, int dst) { mpn_chan_forget_tag(key, dst, ANY_TAG); }

int mpn_chan_world_size(void) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  int n = chan.mpi_ready ? chan.world_size : 0;
  pthread_mutex_unlock(&chan.lock);
  return n;
}

int mpn_chan_held(uint64_t key, int dst) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  int n = 0;
  for (const msg_t* m = chan.head; m; m = m->next) n += m->hdr.key == key && m->hdr.dst == dst;
  pthread_mutex_unlock(&chan.lock);
  return n;
}

/*
 * Progresses the channel until done(arg) holds (checked under the lock),
 * with the deadline and abort rules of mpn_chan_recv; what names the wait in
 * the messages.  done returns 1 when finished, 0 to go on, -1 on an error it
 * has already recorded.
 */
static ncclResult_t progress_until(int (*done)(void*), void* arg, uint64_t deadline_ns,
                                   const volatile int* abort, const char* what) {
  chan_init();
  for (unsigned spins = 0;; spins++) {
    pthread_mutex_lock(&chan.lock);
    mpn_chan_progress();
    int state = done(arg);
    pthread_mutex_unlock(&chan.lock);
    if (state < 0) return ncclSystemError;
    if (state > 0) return ncclSuccess;
    if (abort && *abort)
      return mpn_error_set(NULL, ncclRemoteError, "bootstrap: aborted while waiting for %s", what);
    if (mpn_clock_now_ns() >= deadline_ns)
      return mpn_error_set(NULL, ncclTimeout,
                           "bootstrap: %s did not complete within %lld s (MPINCCL_BOOTSTRAP_TIMEOUT)",
                           what, (long long)mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT));
    if (spins > 100) usleep(spins > 1000 ? 200 : 10);
  }
}

typedef struct {
  MPI_Request* req;
  const volatile int* abort;
  int done, err;
} test_t;

static void test_request(void* arg) {
  test_t* t = arg;
  t->err = MPI_Test(t->req, &t->done, MPI_STATUS_IGNORE);
}

static int request_done(void* arg) {
  const test_t* w = arg;
  test_t t = {.req = w->req, .err = MPI_SUCCESS};
  int ran = run_locked(test_request, &t, w->abort);
  if (ran == MPN_CHAN_NO_MEMORY) return -1;
  if (ran != 0) {
    if (w->abort && *w->abort) return 0; /* progress_until reports the abort */
    mpn_error_set(NULL, ncclInvalidUsage, "bootstrap: MPI was finalized while an MPI collective was pending");
    return -1;
  }
  if (t.err != MPI_SUCCESS) {
    mpn_error_mpi(t.err, "MPI_Test");
    return -1;
  }
  return t.done;
}

ncclResult_t mpn_chan_mpi_wait(MPI_Request* req, uint64_t deadline_ns, const volatile int* abort) {
  test_t w = {.req = req, .abort = abort};
  return progress_until(request_done, &w, deadline_ns, abort, "an MPI collective");
}

static int delivered(void* arg) {
  uint64_t key = *(const uint64_t*)arg;
  for (pending_t* p = chan.sends; p; p = p->next)
    if (p->key == key) return 0;
  for (pending_t* p = chan.unposted; p; p = p->next)
    if (p->key == key) return 0;
  return 1;
}

ncclResult_t mpn_chan_flush(uint64_t key, uint64_t deadline_ns, const volatile int* abort) {
  return progress_until(delivered, &key, deadline_ns, abort, "the delivery of set-up messages");
}

int mpn_chan_sending(void) {
  chan_init();
  pthread_mutex_lock(&chan.lock);
  int pending = chan.sends != NULL || chan.unposted != NULL;
  pthread_mutex_unlock(&chan.lock);
  return pending;
}
