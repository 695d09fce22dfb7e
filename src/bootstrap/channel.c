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
 *
 * MPI's start and finalize, fork and the process identity are
 * channel_life.c's; the state both share is channel_impl.h's.
 */
#define _GNU_SOURCE /* pthread_cond_clockwait */
#include "bootstrap/channel.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/channel_impl.h"
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

#define ANY_TAG INT32_MIN /* (no message has it) */

mpn_chan_state_t mpn_chan = {.cond = PTHREAD_COND_INITIALIZER};

/* Set on the threads the library starts for creation (mpn_chan_worker_begin). */
static __thread int chan_worker;

/* Whether this thread may call MPI itself. */
static int may_call_mpi(void) { return !chan_worker || mpn_chan.thread_level == MPI_THREAD_MULTIPLE; }

uint64_t mpn_chan_deadline(void) {
  return mpn_clock_now_ns() + (uint64_t)mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT) * 1000000000ull;
}

void mpn_chan_locked(void (*fn)(void*), void* arg) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  fn(arg);
  pthread_mutex_unlock(&mpn_chan.lock);
}

static int ring_has(const gone_ring_t* r, uint64_t key, int dst, int tag) {
  unsigned n = r->n < GONE_MAX ? r->n : GONE_MAX;
  for (unsigned i = 0; i < n; i++)
    if (r->at[i].key == key && r->at[i].dst == dst && (r->at[i].tag == ANY_TAG || r->at[i].tag == tag)) return 1;
  return 0;
}

static int gone(uint64_t key, int dst, int tag) {
  return ring_has(&mpn_chan.gone_ranks, key, dst, tag) || ring_has(&mpn_chan.gone_answers, key, dst, tag);
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
  if (mpn_chan.tail)
    mpn_chan.tail->next = m;
  else
    mpn_chan.head = m;
  mpn_chan.tail = m;
  pthread_cond_broadcast(&mpn_chan.cond);
}

/* Gives p to MPI; on failure frees it and returns MPI's error. */
static int post(pending_t* p) {
  int err = MPI_Isend(p->buf, p->bytes, MPI_BYTE, p->world, mpn_chan.tag, MPI_COMM_WORLD, &p->req);
  if (err != MPI_SUCCESS) {
    free(p);
    return err;
  }
  p->next = mpn_chan.sends;
  mpn_chan.sends = p;
  return MPI_SUCCESS;
}

/* Posts the workers' sends in the order they were made (a driver's). */
static void post_unposted(void) {
  while (mpn_chan.unposted) {
    pending_t* p = mpn_chan.unposted;
    mpn_chan.unposted = p->next;
    if (mpn_chan.unposted == NULL) mpn_chan.unposted_tail = NULL;
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
  mpn_chan_init();
  if (len > INT_MAX - sizeof(msg_hdr_t)) /* MPI counts are ints */
    return mpn_error_set(NULL, ncclInvalidArgument, "bootstrap: a message of %zu bytes is too long", len);
  msg_hdr_t hdr = {.key = key, .src = src, .dst = dst, .tag = tag, .len = (uint32_t)len};
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&mpn_chan.lock);
  if (to->proc == mpn_chan.proc) {
    deposit(&hdr, buf);
  } else if (!mpn_chan.mpi_ready || to->world < 0) {
    res = mpn_error_set(NULL, ncclInvalidUsage,
                        "bootstrap: rank %d lives in another process but MPI is not available "
                        "to reach it",
                        dst);
  } else if (to->world >= mpn_chan.world_size) { /* MPI_Isend would abort the job */
    res = mpn_error_set(NULL, ncclInvalidArgument,
                        "bootstrap: rank %d is said to be MPI_COMM_WORLD rank %d, outside this job's %d ranks", dst,
                        to->world, mpn_chan.world_size);
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
      if (may_call_mpi() && mpn_chan.unposted == NULL) {
        int err = post(p);
        if (err != MPI_SUCCESS) res = mpn_error_mpi(err, "MPI_Isend");
      } else { /* after the queued ones, so that messages keep their order */
        if (mpn_chan.unposted_tail)
          mpn_chan.unposted_tail->next = p;
        else
          mpn_chan.unposted = p;
        mpn_chan.unposted_tail = p;
        if (may_call_mpi()) post_unposted();
      }
    }
  }
  pthread_mutex_unlock(&mpn_chan.lock);
  return res;
}

/* Runs the workers' tasks, oldest first, and wakes them. */
static void run_tasks(void) {
  if (mpn_chan.tasks == NULL) return;
  while (mpn_chan.tasks) {
    task_t* t = mpn_chan.tasks;
    mpn_chan.tasks = t->next;
    if (mpn_chan.tasks == NULL) mpn_chan.tasks_tail = NULL;
    t->fn(t->arg);
    t->done = 1;
  }
  pthread_cond_broadcast(&mpn_chan.cond);
}

void mpn_chan_progress(void) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  if (!mpn_chan.mpi_ready || !may_call_mpi()) { /* a worker below MPI_THREAD_MULTIPLE: a driver will */
    pthread_mutex_unlock(&mpn_chan.lock);
    return;
  }
  post_unposted(); /* before the tasks: one may block (MPI_Comm_split) */
  run_tasks();
  mpn_chan_frees_run(0);
  for (pending_t** pp = &mpn_chan.sends; *pp;) {
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
    if (MPI_Improbe(MPI_ANY_SOURCE, mpn_chan.tag, MPI_COMM_WORLD, &found, &mh, &st) != MPI_SUCCESS || !found) break;
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
  pthread_mutex_unlock(&mpn_chan.lock);
}

/* Takes t off the queue of tasks (it has not started: drivers run tasks
 * holding the lock, which the caller holds). */
static void task_unqueue(task_t* t) {
  task_t* prev = NULL;
  for (task_t* q = mpn_chan.tasks; q; prev = q, q = q->next) {
    if (q != t) continue;
    if (prev)
      prev->next = q->next;
    else
      mpn_chan.tasks = q->next;
    if (mpn_chan.tasks_tail == q) mpn_chan.tasks_tail = prev;
    return;
  }
}

/* Runs fn(arg) on a thread that may call MPI: this one, or (a worker below
 * MPI_THREAD_MULTIPLE) the next driver, waiting for it.  Lock held once.
 * Returns 0 once fn ran, else MPN_CHAN_NOT_RUN or MPN_CHAN_NO_MEMORY (as
 * mpn_chan_call). */
static int run_locked(void (*fn)(void*), void* arg, const volatile int* abort) {
  if (!mpn_chan.mpi_ready) return MPN_CHAN_NOT_RUN;
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
  if (mpn_chan.tasks_tail)
    mpn_chan.tasks_tail->next = t;
  else
    mpn_chan.tasks = t;
  mpn_chan.tasks_tail = t;
  while (!t->done) {
    if (abort && *abort) {
      task_unqueue(t);
      free(t);
      return MPN_CHAN_NOT_RUN;
    }
    struct timespec ts = mpn_clock_after(1000000);
    pthread_cond_clockwait(&mpn_chan.cond, &mpn_chan.lock, CLOCK_MONOTONIC, &ts);
  }
  int ran = t->done > 0;
  free(t);
  return ran ? 0 : MPN_CHAN_NOT_RUN;
}

int mpn_chan_call(void (*fn)(void*), void* arg, int blocks, const volatile int* abort) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  int multiple = mpn_chan.mpi_ready && mpn_chan.thread_level == MPI_THREAD_MULTIPLE;
  if (blocks && multiple) { /* others go on meanwhile */
    pthread_mutex_unlock(&mpn_chan.lock);
    fn(arg);
    return 0;
  }
  int ran = run_locked(fn, arg, abort);
  pthread_mutex_unlock(&mpn_chan.lock);
  return ran;
}

void mpn_chan_worker_begin(void) {
  chan_worker = 1;
  mpn_error_mpi_strings(may_call_mpi()); /* (MPI_Error_string is an MPI call too) */
  __atomic_add_fetch(&mpn_chan.workers, 1, __ATOMIC_ACQ_REL);
}

void mpn_chan_worker_end(void) {
  if (!chan_worker) return;
  chan_worker = 0;
  mpn_error_mpi_strings(1);
  __atomic_sub_fetch(&mpn_chan.workers, 1, __ATOMIC_ACQ_REL);
}

void mpn_chan_drive(mpn_chan_drive_t how) {
  /* Also with no worker left: one may have left sends behind (an error path). */
  if (chan_worker || (__atomic_load_n(&mpn_chan.workers, __ATOMIC_ACQUIRE) == 0 &&
                      __atomic_load_n(&mpn_chan.unposted, __ATOMIC_RELAXED) == NULL && !mpn_chan_frees_waiting()))
    return;
  mpn_chan_init();
  /* (read without the lock, which a driver may hold in MPI_Comm_split: a
   * poll must not wait for it) */
  int ready = __atomic_load_n(&mpn_chan.mpi_ready, __ATOMIC_ACQUIRE),
      level = __atomic_load_n(&mpn_chan.thread_level, __ATOMIC_ACQUIRE);
  if (!ready || level == MPI_THREAD_MULTIPLE) return; /* workers call MPI themselves, or MPI is gone */
  if (how != MPN_CHAN_DRIVE_CREATE && level < MPI_THREAD_SERIALIZED) {
    int main_thread = 0;
    if (MPI_Is_thread_main(&main_thread) != MPI_SUCCESS || !main_thread) return;
  }
  if (how == MPN_CHAN_DRIVE_POLL) {
    if (pthread_mutex_trylock(&mpn_chan.lock) != 0) return;
    mpn_chan_progress();
    pthread_mutex_unlock(&mpn_chan.lock);
    return;
  }
  mpn_chan_progress();
}

/* Unlinks and returns the oldest matching message, or NULL. */
static msg_t* take(uint64_t key, int dst, int src, int tag) {
  msg_t* prev = NULL;
  for (msg_t* m = mpn_chan.head; m; prev = m, m = m->next) {
    if (m->hdr.key != key || m->hdr.dst != dst || m->hdr.src != src || m->hdr.tag != tag) continue;
    if (prev) prev->next = m->next;
    else
      mpn_chan.head = m->next;
    if (mpn_chan.tail == m) mpn_chan.tail = prev;
    return m;
  }
  return NULL;
}

/* The first failure notice to dst of context key, left filed; or NULL. */
static const msg_t* notice(uint64_t key, int dst) {
  for (const msg_t* m = mpn_chan.head; m; m = m->next)
    if (m->hdr.key == key && m->hdr.dst == dst && m->hdr.tag == MPN_TAG_FAILED) return m;
  return NULL;
}

int mpn_chan_noticed(uint64_t key, int dst) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  const msg_t* m = notice(key, dst);
  int src = m ? m->hdr.src : -1;
  pthread_mutex_unlock(&mpn_chan.lock);
  return src;
}

/* mpn_chan_recv, or with got mpn_chan_recv_upto. */
static ncclResult_t chan_recv(uint64_t key, int dst, int src, int tag, void* buf, size_t len, size_t* got,
                              uint64_t deadline_ns, const volatile int* abort) {
  mpn_chan_init();
  uint64_t wait_ns = 20000; /* grows to 1 ms while nothing arrives */
  pthread_mutex_lock(&mpn_chan.lock);
  for (;;) {
    msg_t* m = take(key, dst, src, tag);
    if (m == NULL) {
      mpn_chan_progress();
      m = take(key, dst, src, tag);
    }
    if (m) {
      pthread_mutex_unlock(&mpn_chan.lock);
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
      pthread_mutex_unlock(&mpn_chan.lock);
      return mpn_error_set(NULL, ncclRemoteError,
                           "bootstrap: rank %d failed in a set-up step of the communicator that rank %d waited "
                           "for, and left its set-up collectives (%s)",
                           from, dst, why);
    }
    if (abort && *abort) {
      pthread_mutex_unlock(&mpn_chan.lock);
      if (src == MPN_RANK_SERVICE)
        return mpn_error_set(NULL, ncclRemoteError, "bootstrap: rank %d aborted while waiting for the rendezvous", dst);
      return mpn_error_set(NULL, ncclRemoteError, "bootstrap: aborted while waiting for rank %d",
                           src);
    }
    uint64_t now = mpn_clock_now_ns();
    if (now >= deadline_ns) {
      pthread_mutex_unlock(&mpn_chan.lock);
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
    pthread_cond_clockwait(&mpn_chan.cond, &mpn_chan.lock, CLOCK_MONOTONIC, &ts);
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
  gone_ring_t* r = tag == ANY_TAG ? &mpn_chan.gone_ranks : &mpn_chan.gone_answers;
  r->at[r->n % GONE_MAX].key = key;
  r->at[r->n % GONE_MAX].dst = dst;
  r->at[r->n % GONE_MAX].tag = tag;
  r->n++;
  msg_t *m = mpn_chan.head, *prev = NULL;
  while (m) {
    msg_t* next = m->next;
    if (m->hdr.key == key && m->hdr.dst == dst && (tag == ANY_TAG || m->hdr.tag == tag)) {
      if (prev) prev->next = next;
      else
        mpn_chan.head = next;
      if (mpn_chan.tail == m) mpn_chan.tail = prev;
      free(m);
    } else {
      prev = m;
    }
    m = next;
  }
}

void mpn_chan_forget_tag(uint64_t key, int dst, int tag) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  forget_locked(key, dst, tag);
  pthread_mutex_unlock(&mpn_chan.lock);
}

void mpn_chan_forget(uint64_t key, int dst) { mpn_chan_forget_tag(key, dst, ANY_TAG); }

int mpn_chan_held(uint64_t key, int dst) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  int n = 0;
  for (const msg_t* m = mpn_chan.head; m; m = m->next) n += m->hdr.key == key && m->hdr.dst == dst;
  pthread_mutex_unlock(&mpn_chan.lock);
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
  mpn_chan_init();
  for (unsigned spins = 0;; spins++) {
    pthread_mutex_lock(&mpn_chan.lock);
    mpn_chan_progress();
    int state = done(arg);
    pthread_mutex_unlock(&mpn_chan.lock);
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
  for (pending_t* p = mpn_chan.sends; p; p = p->next)
    if (p->key == key) return 0;
  for (pending_t* p = mpn_chan.unposted; p; p = p->next)
    if (p->key == key) return 0;
  return 1;
}

ncclResult_t mpn_chan_flush(uint64_t key, uint64_t deadline_ns, const volatile int* abort) {
  return progress_until(delivered, &key, deadline_ns, abort, "the delivery of set-up messages");
}

int mpn_chan_sending(void) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  int pending = mpn_chan.sends != NULL || mpn_chan.unposted != NULL;
  pthread_mutex_unlock(&mpn_chan.lock);
  return pending;
}
