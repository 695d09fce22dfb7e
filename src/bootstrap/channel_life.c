/*
 * channel_life.c - the bootstrap channel's life in its process: identity, MPI's
 * start, the hook run at MPI_Finalize, MPI_Finalize at exit, fork handlers and
 * the deferred frees of splits' MPI communicators (the messages: channel.c).
 */
#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "bootstrap/channel_impl.h"
#include "core/clock.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"

/* A split's MPI communicator whose free waits for a thread that may make it. */
typedef struct comm_free {
  struct comm_free* next;
  MPI_Comm comm;
} comm_free_t;

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
  pthread_mutex_init(&mpn_chan.lock, &attr);
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
  pthread_mutex_lock(&mpn_chan.lock);
  pthread_mutex_lock(&frees_lock);
}

static void chan_after_fork_parent(void) {
  pthread_mutex_unlock(&frees_lock);
  pthread_mutex_unlock(&mpn_chan.lock);
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
  pthread_cond_init(&mpn_chan.cond, NULL);
  mpn_chan.proc = chan_proc_new();
  mpn_chan.mpi_inherited |= mpn_chan.mpi_ready;
  mpn_chan.mpi_ready = 0;
  /* The parent's sends, its workers' tasks and its communicators to free:
   * none of them is the child's to finish (their memory is left). */
  mpn_chan.sends = mpn_chan.unposted = mpn_chan.unposted_tail = NULL;
  mpn_chan.tasks = mpn_chan.tasks_tail = NULL;
  mpn_chan.workers = 0;
  frees = NULL;
  mpn_service_after_fork();
}

static void chan_init_once(void) {
  chan_lock_init();
  mpn_chan.proc = chan_proc_new();
  mpn_chan.world_rank = -1;
  pthread_atfork(chan_before_fork, chan_after_fork_parent, chan_after_fork_child);
}

void mpn_chan_init(void) { pthread_once(&chan_once, chan_init_once); }

uint64_t mpn_chan_proc_id(void) {
  mpn_chan_init();
  return mpn_chan.proc;
}

mpn_endpoint_t mpn_chan_self(void) {
  mpn_chan_init();
  mpn_endpoint_t ep = {.proc = mpn_chan.proc, .world = mpn_chan.mpi_ready ? mpn_chan.world_rank : -1};
  return ep;
}

/* Read once: getenv is not safe beside a setenv of another thread (drivers and
 * MPI libraries call setenv while they start), so creation threads never read
 * the environment themselves; mpn_env_read_early() runs this first. */
static int launcher_rank = -1;
static pthread_once_t launcher_once = PTHREAD_ONCE_INIT;

static void launcher_read(void) {
  static const char* vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"};
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
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  int ready = mpn_chan.mpi_ready;
  pthread_mutex_unlock(&mpn_chan.lock);
  return ready;
}

int mpn_chan_mpi_thread_level(void) { return mpn_chan.thread_level; }
int mpn_chan_mpi_owned(void) { return mpn_chan.mpi_owned; }

/* Whether this thread may make the MPI calls of a destroy or abort: under
 * MPI_THREAD_MULTIPLE any, else MPI's main thread only (the application's
 * other threads may be in MPI calls of their own meanwhile). */
static int may_end_here(void) {
  int main_thread = 0;
  return __atomic_load_n(&mpn_chan.thread_level, __ATOMIC_ACQUIRE) == MPI_THREAD_MULTIPLE ||
         (MPI_Is_thread_main(&main_thread) == MPI_SUCCESS && main_thread);
}

int mpn_chan_frees_waiting(void) { return __atomic_load_n(&frees, __ATOMIC_ACQUIRE) != NULL; }

/* The frees handed over, if this thread may make them (or finalizing). */
void mpn_chan_frees_run(int finalizing) {
  if (!mpn_chan_frees_waiting() || (!finalizing && !may_end_here())) return;
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
  pthread_mutex_lock(&mpn_chan.lock);
  uint64_t until = mpn_clock_now_ns() + 2000000000ull;
  while ((mpn_chan.sends || mpn_chan.unposted) && mpn_clock_now_ns() < until) mpn_chan_progress();
  for (pending_t *p = mpn_chan.sends, *next; p; p = next) {
    next = p->next;
    MPI_Cancel(&p->req);
    MPI_Request_free(&p->req);
    free(p);
  }
  for (pending_t *p = mpn_chan.unposted, *next; p; p = next) { /* (only if posting failed) */
    next = p->next;
    free(p);
  }
  mpn_chan.sends = mpn_chan.unposted = mpn_chan.unposted_tail = NULL;
  mpn_chan_frees_run(1); /* (MPI works while it deletes MPI_COMM_SELF's attributes) */
  /* Workers' MPI calls not done by now never will be: they fail. */
  for (task_t *t = mpn_chan.tasks, *next; t; t = next) {
    next = t->next;
    t->done = -1;
  }
  mpn_chan.tasks = mpn_chan.tasks_tail = NULL;
  pthread_cond_broadcast(&mpn_chan.cond);
  __atomic_store_n(&mpn_chan.mpi_ready, 0, __ATOMIC_RELEASE); /* (mpn_chan_drive reads it without the lock) */
  pthread_mutex_unlock(&mpn_chan.lock);
  return MPI_SUCCESS;
}

static void chan_finalize_at_exit(void) {
  if (mpn_chan.mpi_inherited) return; /* a child of fork(): MPI is its parent's to finalize */
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
  if (mpn_chan.mpi_inherited)
    return mpn_error_set(NULL, ncclInvalidUsage,
                         "bootstrap: this process is a child of fork() of one that used MPI, which it may not use "
                         "(its parent's connections are not its own): ids made here need MPINCCL_BOOTSTRAP=local");
  int inited = 0, finalized = 0;
  MPN_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized)
    return mpn_error_set(NULL, ncclInvalidUsage, "MPI is already finalized: communicators need MPI for their set-up");
  MPN_MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    if (!may_init)
      return mpn_error_set(NULL, ncclInvalidUsage,
                           "MPI is not initialized and "
                           "MPINCCL_BOOTSTRAP does not allow starting it");
    MPN_MPI_CHECK(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &mpn_chan.thread_level));
    mpn_chan.mpi_owned = 1;
    atexit(chan_finalize_at_exit);
  } else {
    MPN_MPI_CHECK(MPI_Query_thread(&mpn_chan.thread_level));
  }
  MPN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &mpn_chan.world_rank));
  MPN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &mpn_chan.world_size));
  int launcher = mpn_chan_launcher_rank();
  if (launcher >= 0 && launcher != mpn_chan.world_rank)
    MPN_WARN(
        "bootstrap: the launcher says world rank %d, MPI says %d; unique ids made before "
        "MPI started in this process will not work",
        launcher, mpn_chan.world_rank);
  MPN_CHECK(chan_hook_finalize());
  mpn_chan.tag = (int)mpn_param_int(MPN_PARAM_BOOTSTRAP_TAG);
  __atomic_store_n(&mpn_chan.mpi_ready, 1, __ATOMIC_RELEASE); /* after thread_level: mpn_chan_drive */
  MPN_INFO(MPN_SUBSYS_BOOTSTRAP, "MPI %s by %s, thread level %d, world rank %d, tag %d",
           mpn_chan.mpi_owned ? "initialized" : "found initialized", mpn_chan.mpi_owned ? "mpinccl" : "the application",
           mpn_chan.thread_level, mpn_chan.world_rank, mpn_chan.tag);
  return ncclSuccess;
}

ncclResult_t mpn_chan_mpi_start(int may_init) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  ncclResult_t res = mpn_chan.mpi_ready ? ncclSuccess : chan_mpi_start_locked(may_init);
  pthread_mutex_unlock(&mpn_chan.lock);
  return res;
}

int mpn_chan_world_size(void) {
  mpn_chan_init();
  pthread_mutex_lock(&mpn_chan.lock);
  int n = mpn_chan.mpi_ready ? mpn_chan.world_size : 0;
  pthread_mutex_unlock(&mpn_chan.lock);
  return n;
}
