/*
 * pair.c - shared-memory pairs: a file in /dev/shm per (communicator, sender,
 * receiver), made whole (sized, zero-filled: the valid initial state, and
 * stamped) by whichever side needs it first before it gets its name, and
 * unlinked by the second once it is set up, mapped and registered with CUDA
 * so that streams can wait on and write its flags.  Mappings are shared by
 * the ranks of one process.  Errors are left here for the other side, and
 * every wait on a pair can be released at once (a peer gone, an abort).
 * Files whose creator was killed before its peer opened them are swept away
 * by the next process of the host that maps a pair.
 */
#define _GNU_SOURCE /* O_TMPFILE (Linux) */
#include "p2p/pair.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap/channel.h"
#include "core/clock.h"
#include "core/debug.h"
#include "core/error.h"
#include "core/param.h"
#include "core/proc.h"
#include "cuda/device.h"
#include "cuda/driver.h"
#include "cuda/service.h"
#include "p2p/eager.h"

/* Pair file names, after shm_open's '/': both sides make the same one. */
#define PAIR_NAME_FORMAT "mpinccl-%016llx-%d-%d"
/* Where shm_open keeps them (glibc on Linux). */
#define PAIR_SHM_DIR "/dev/shm"

/*
 * A mapping is listed from the start of its set-up, so that no other thread
 * of the process opens its file meanwhile, but set up without map_lock: the
 * second side waits there for the creator's decision (flags_adopt, up to
 * MPINCCL_BOOTSTRAP_TIMEOUT), which must hold up neither the pairs of other
 * peers and communicators nor an unmap.  Until ready only its setter
 * touches the pair; other threads wanting it wait for map_ready.
 */
typedef struct mapping {
  struct mapping* next;
  mpn_pair_t pair;
  int refs;
  int ready; /* under map_lock */
} mapping_t;

static mapping_t* mappings;
static pthread_mutex_t map_lock = PTHREAD_MUTEX_INITIALIZER;
/* Broadcast when a set-up ends: its mapping ready, or unlisted. */
static pthread_cond_t map_ready = PTHREAD_COND_INITIALIZER;
static uint64_t last_gen; /* under map_lock */

/*
 * Pairs this process made and let go of before the peer opened them (pairs
 * are made on first use, so something was posted into them): a one-hop
 * message is done on its sender's side before its receiver posts, and a
 * sender that destroys its communicator then must not take the message
 * with it.  Their files and device blocks stay for the peer, which unlinks
 * the name once it opened the file; names the peer never took go when the
 * process exits (its device memory goes then anyway).  Under map_lock.
 */
typedef struct kept {
  char name[96]; /* (mpn_pair_t's) */
  void* dflags;  /* its device block, or NULL (or forgotten: mpn_pair_forget_device) */
  int dev;       /* dflags's device */
  struct kept* next;
} kept_t;
static kept_t* kept;
static pid_t kept_pid; /* the process that kept them: a forked child's exit leaves them */

/* The kept pairs whose name the peer took (it unlinks the name once it has
 * opened the file and mapped the device block) go: they are moved to *gone,
 * whose device blocks the caller frees after map_lock (kept_free), as those
 * of pairs the peer opened before this side let go (the peer's mapping
 * keeps what it maps).  So a program that makes and destroys communicators
 * in a loop holds the blocks of the pairs not taken yet, not one per
 * communicator.  Under map_lock. */
static void kept_reap(kept_t** gone) {
  for (kept_t** pk = &kept; *pk;) {
    kept_t* k = *pk;
    int fd = shm_open(k->name, O_RDONLY, 0);
    if (fd >= 0 || errno != ENOENT) {
      if (fd >= 0) close(fd);
      pk = &k->next;
      continue;
    }
    *pk = k->next;
    k->next = *gone;
    *gone = k;
  }
}

/* Frees what kept_reap took, without map_lock: cudaFree may wait for the
 * whole device. */
static void kept_free(kept_t* gone) {
  while (gone) {
    kept_t* k = gone;
    gone = k->next;
    if (k->dflags) mpn_cuda_forget(cudaFree(k->dflags));
    free(k);
  }
}

static void kept_unlink_all(void) {
  if (getpid() != kept_pid) return;
  /* Not while another thread holds map_lock (an unmap's CUDA calls may
   * block): the exit goes on, and the names stay in /dev/shm. */
  if (pthread_mutex_trylock(&map_lock) != 0) return;
  for (kept_t* k = kept; k; k = k->next) shm_unlink(k->name); /* (ENOENT: the peer took it) */
  pthread_mutex_unlock(&map_lock);
}

/* Keeps name and its device block for the peer (map_lock held); 0 if it
 * cannot be noted. */
static int kept_add(const char* name, void* dflags, int dev) {
  static int registered;
  kept_t* k = calloc(1, sizeof(*k));
  if (k == NULL) return 0;
  if (!registered) registered = atexit(kept_unlink_all) == 0;
  kept_pid = getpid();
  snprintf(k->name, sizeof(k->name), "%s", name);
  k->dflags = dflags;
  k->dev = dev;
  k->next = kept;
  kept = k;
  return 1;
}

/* Graph slots whose graph is gone on this side, not yet marked (a stack
 * CUDA's thread pushes on without a lock). */
typedef struct released {
  struct released* next;
  uint64_t gen;
  uint64_t seq; /* the message or signal */
  int kind, side;
  uint32_t slot;
} released_t;
static released_t* released_news;
static uint64_t filed, marked, orphaned; /* slot sides, for tests and logs (atomics) */

/* A creator's pair that failed to set up: its peer is told (it would wait
 * for the flags' place until the bootstrap timeout) and the name goes, so
 * that a later launch creates the file afresh instead of adopting this one. */
static void pair_abandon(mpn_pair_t* p, void* mem) {
  if (!p->created) return;
  if (mem) __atomic_store_n(&((mpn_pair_mem_t*)mem)->flags_where, MPN_FLAGS_FAILED, __ATOMIC_RELEASE);
  shm_unlink(p->name);
}

/*
 * A new pair file, whole before it has a name: made unnamed in PAIR_SHM_DIR
 * (O_TMPFILE), sized, mapped and stamped, then linked under the pair's name,
 * which fails (EEXIST) where the peer made it first.  A creator killed at
 * any step before the link leaves nothing (the file goes with its last
 * descriptor and mapping), and after it a stamped file, which the peer and
 * the sweep can judge.  Returns the mapping, or MAP_FAILED with errno.
 */
static void* pair_make(const mpn_pair_t* p, size_t size) {
  int fd = open(PAIR_SHM_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return MAP_FAILED;
  void* mem =
      ftruncate(fd, (off_t)size) == 0 ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (mem != MAP_FAILED) {
    mpn_pair_stamp(mem);
    /* (linking the descriptor itself, AT_EMPTY_PATH, needs CAP_DAC_READ_SEARCH) */
    char from[64], to[160];
    snprintf(from, sizeof(from), "/proc/self/fd/%d", fd);
    snprintf(to, sizeof(to), PAIR_SHM_DIR "%s", p->name);
    if (linkat(AT_FDCWD, from, AT_FDCWD, to, AT_SYMLINK_FOLLOW) != 0) {
      int e = errno;
      munmap(mem, size);
      mem = MAP_FAILED;
      errno = e;
    }
  }
  int e = errno;
  close(fd);
  errno = e;
  return mem;
}

/* Maps the pair's file by its name: the peer's (peers), or, where a file
 * cannot be made whole (no O_TMPFILE or no /proc), one made here by name
 * and stamped after shm_open: a creator killed in between leaves an
 * unstamped file that nobody can judge (docs/P2P.md, known problem 15). */
static ncclResult_t pair_open_named(mpn_pair_t* p, size_t size, int peers, void** out) {
  int fd = peers ? -1 : shm_open(p->name, O_RDWR | O_CREAT | O_EXCL, 0600);
  p->created = fd >= 0;
  if (fd < 0 && (peers || errno == EEXIST)) fd = shm_open(p->name, O_RDWR, 0600);
  if (fd < 0) return mpn_error_set(NULL, ncclSystemError, "shm_open %s failed: %s", p->name, strerror(errno));
  /* Both sides size the file; extending with zeros is idempotent. */
  if (ftruncate(fd, (off_t)size) != 0) {
    int e = errno;
    close(fd);
    pair_abandon(p, NULL);
    return mpn_error_set(NULL, ncclSystemError, "ftruncate %s failed: %s", p->name, strerror(e));
  }
  void* mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    int e = errno;
    pair_abandon(p, NULL);
    return mpn_error_set(NULL, ncclSystemError, "mmap %s failed: %s", p->name, strerror(e));
  }
  /* First, so that a creator killed at any later step leaves a file
   * that others can tell is stale (mpn_pair_sweep). */
  if (p->created) mpn_pair_stamp(mem);
  *out = mem;
  return ncclSuccess;
}

static ncclResult_t pair_open(mpn_pair_t* p) {
  size_t size = sizeof(mpn_pair_mem_t);
  void* mem = pair_make(p, size);
  p->created = mem != MAP_FAILED;
  if (mem == MAP_FAILED) {
    int peers = errno == EEXIST;
    if (!peers) {
      static int told; /* (once per process) */
      if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        MPN_INFO(MPN_SUBSYS_P2P,
                 "%s: pair files made by name (%s): one whose creator is killed before "
                 "stamping it stays in %s",
                 p->name, strerror(errno), PAIR_SHM_DIR);
    }
    ncclResult_t res = pair_open_named(p, size, peers, &mem);
    if (res != ncclSuccess) return res;
  }
  cudaError_t err = cudaHostRegister(mem, size, cudaHostRegisterMapped | cudaHostRegisterPortable);
  void* dev = NULL;
  int registered = err == cudaSuccess;
  if (registered) err = cudaHostGetDevicePointer(&dev, mem, 0);
  if (err != cudaSuccess) {
    mpn_cuda_forget(err);
    if (registered) mpn_cuda_forget(cudaHostUnregister(mem)); /* (else CUDA keeps the pages pinned) */
    pair_abandon(p, mem); /* tmpfs files are sparse: a full /dev/shm shows here first */
    munmap(mem, size);
    return mpn_error_set(NULL, ncclUnhandledCudaError,
                         "registering %s with CUDA failed: %s (is /dev/shm full? each pair of ranks "
                         "takes %zu bytes there)",
                         p->name, cudaGetErrorString(err), size);
  }
  p->mem = mem;
  p->dev = (CUdeviceptr)dev;
  return ncclSuccess;
}

/* The pair file's mapping goes: from CUDA, then from the process. */
static void pair_mem_unmap(mpn_pair_t* p) {
  mpn_cuda_forget(cudaHostUnregister(p->mem));
  munmap(p->mem, sizeof(mpn_pair_mem_t));
  p->mem = NULL;
}

/* The side that opened the creator's file could not set it up (its device
 * flags not mapped, say): the creator, which may have posted messages and
 * whose streams may wait, is told through the file, as by an abort (its
 * watchdog releases them: ncclRemoteError), before this side lets go. */
static void pair_tell_creator(mpn_pair_t* p, ncclResult_t res) {
  if (p->created || p->mem == NULL) return;
  char text[256];
  snprintf(text, sizeof(text), "the peer could not set up %s: %s", p->name, mpn_error_last(NULL));
  mpn_pair_report(p, MPN_PAIR_TO_BOTH, res == ncclSuccess ? ncclRemoteError : res, text); /* (its side unknown here) */
  __atomic_store_n(&p->mem->aborted, 1, __ATOMIC_RELEASE);
}

/* Undoes pair_open after a later step failed. */
static void pair_close(mpn_pair_t* p) {
  pair_abandon(p, p->mem);
  pair_mem_unmap(p);
}

/* The creator decides where the flags live and publishes it last. */
static ncclResult_t flags_publish(mpn_pair_t* p) {
  mpn_pair_mem_t* mem = p->mem;
  int dev = -1;
  const char* choice = mpn_param_str(MPN_PARAM_FLAGS);
  int forced = strcasecmp(choice, "device") == 0;
  int device = forced || strcasecmp(choice, "auto") == 0;
  if (device) {
    cudaError_t got = cudaGetDevice(&dev);
    mpn_cuda_forget(got);
    device = got == cudaSuccess;
  }
  uint32_t where = MPN_FLAGS_HOST;
  if (device) {
    void* d = NULL;
    /* A block of its own, which the peer can map (see MPN_IPC_BLOCK_BYTES;
     * its layout: eager.h), with the graph slots' inbox where it may serve
     * (both sides read the block's size: mpn_eager_graph_ok; its senders'
     * waits by memory operations are NOR waits). */
    int graph_inbox = mpn_param_int(MPN_PARAM_EAGER_GRAPH) && mpn_driver_wait_nor(dev);
    cudaError_t err =
        mpn_cuda_alloc_zeroed(graph_inbox ? MPN_PAIR_DBLOCK_BYTES : MPN_IPC_BLOCK_BYTES, MPN_PAIR_DZERO_BYTES, &d);
    ncclResult_t res = err == cudaSuccess ? mpn_ipc_export_own(NULL, p->name, d, "the device flags", &mem->flags_desc)
                                          : ncclUnhandledCudaError;
    if (err != cudaSuccess) mpn_error_set(NULL, res, "device flags for %s: %s", p->name, cudaGetErrorString(err));
    if (res != ncclSuccess) {
      if (d) mpn_cuda_forget(cudaFree(d));
      if (forced) return res;
      MPN_INFO(MPN_SUBSYS_P2P, "%s: flags in host memory (%s)", p->name, mpn_error_last(NULL));
    } else {
      mem->flags_owner = mpn_chan_proc_id();
      p->dflags = (CUdeviceptr)d;
      p->dflags_dev = dev;
      where = MPN_FLAGS_DEVICE;
    }
  }
  __atomic_store_n(&mem->flags_where, where, __ATOMIC_RELEASE);
  return ncclSuccess;
}

/* Whether c stamps a file whose creator, of PID namespace pidns, is gone. */
static int creator_gone(const mpn_pair_creator_t* c, uint64_t pidns) {
  return __atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) == MPN_PAIR_MAGIC && c->pidns == pidns && pidns != 0 &&
         mpn_proc_gone(c->pid, c->start_time);
}

/* How often (in polls of 50 us) the wait below asks whether the creator
 * still lives: about every 20 ms. */
#define ADOPT_LIVENESS_POLLS 400

/* The other side waits (at set-up only) for the creator's decision; a
 * creator that died first (killed, crashed) ends the wait at once instead
 * of at MPINCCL_BOOTSTRAP_TIMEOUT, and so does an abort of the
 * communicator (abort, if not NULL), which waits for this launch. */
static ncclResult_t flags_adopt(mpn_pair_t* p, const volatile int* abort) {
  mpn_pair_mem_t* mem = p->mem;
  uint64_t deadline = mpn_chan_deadline(), pidns = mpn_proc_pidns();
  uint32_t where;
  for (unsigned polls = 0; (where = __atomic_load_n(&mem->flags_where, __ATOMIC_ACQUIRE)) == MPN_FLAGS_UNSET; polls++) {
    if (mpn_clock_now_ns() > deadline)
      return mpn_error_set(NULL, ncclTimeout, "the peer did not finish setting up %s", p->name);
    if (abort && *abort)
      return mpn_error_set(NULL, ncclInvalidUsage, "the communicator was aborted while %s was being set up", p->name);
    if (polls % ADOPT_LIVENESS_POLLS == ADOPT_LIVENESS_POLLS - 1 && creator_gone(&mem->creator, pidns))
      return mpn_error_set(NULL, ncclRemoteError, "the process that made %s (pid %d) ended before setting it up",
                           p->name, (int)mem->creator.pid);
    usleep(50);
  }
  if (where == MPN_FLAGS_FAILED)
    return mpn_error_set(NULL, ncclRemoteError, "the peer could not set up %s (its log says why)", p->name);
  if (where != MPN_FLAGS_DEVICE) return ncclSuccess;
  /* Through the import cache, which knows what else of the creator is
   * mapped here; pinned until the pair is unmapped. */
  void* d = NULL;
  ncclResult_t res = mpn_ipc_import(mem->flags_owner, &mem->flags_desc, &d, &p->dflags_import);
  if (res != ncclSuccess) {
    char why[256];
    snprintf(why, sizeof(why), "%s", mpn_error_last(NULL));
    return mpn_error_set(NULL, res, "mapping the device flags of %s: %s", p->name, why);
  }
  mpn_ipc_mark_used(&p->dflags_import, NULL, 1);
  p->dflags = (CUdeviceptr)d;
  return ncclSuccess;
}

static ncclResult_t pair_map(uint64_t key, int sender, int receiver, const volatile int* abort, mpn_pair_t** out);

/* Pairs are mapped on first use, maybe while the caller's stream captures a
 * graph: registering memory with CUDA is not part of it (relaxed mode). */
ncclResult_t mpn_pair_map(uint64_t key, int sender, int receiver, const volatile int* abort, mpn_pair_t** out) {
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  ncclResult_t res = pair_map(key, sender, receiver, abort, out);
  mpn_cuda_relaxed_leave(mode);
  return res;
}

/* Opens and sets up p, without map_lock; undone on failure. */
static ncclResult_t pair_setup(mpn_pair_t* p, const volatile int* abort) {
  ncclResult_t res = pair_open(p);
  if (res != ncclSuccess) return res;
  res = p->created ? flags_publish(p) : flags_adopt(p, abort);
  if (res != ncclSuccess) {
    pair_tell_creator(p, res);
    pair_close(p);
    return res;
  }
  if (!p->created) {
    /* Both sides hold the file now, and nobody opens it by name again:
     * the name goes at once, so that a process killed later leaves
     * nothing behind in /dev/shm. */
    shm_unlink(p->name);
    __atomic_store_n(&p->mem->name_gone, 1, __ATOMIC_RELEASE);
  }
  return ncclSuccess;
}

static void mapping_unlist(mapping_t* m) {
  mapping_t** pm = &mappings;
  while (*pm != m) pm = &(*pm)->next;
  *pm = m->next;
}

/* The mapping of name, listed and not ready, for this thread to set up;
 * or, when another thread set it up meanwhile, *found.  Under map_lock. */
static ncclResult_t mapping_take(const char* name, mapping_t** found, mapping_t** fresh) {
  mapping_t* m;
  for (;;) { /* (a set-up that failed is unlisted: then this thread tries) */
    for (m = mappings; m && strcmp(m->pair.name, name) != 0; m = m->next) {}
    if (m == NULL || m->ready) break;
    pthread_cond_wait(&map_ready, &map_lock);
  }
  if (m) {
    *found = m;
    return ncclSuccess;
  }
  m = calloc(1, sizeof(*m));
  if (m == NULL) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  snprintf(m->pair.name, sizeof(m->pair.name), "%s", name);
  m->pair.gen = ++last_gen;
  m->next = mappings;
  mappings = m;
  *fresh = m;
  return ncclSuccess;
}

static void sweep_once(void) { mpn_pair_sweep(); }

static ncclResult_t pair_map(uint64_t key, int sender, int receiver, const volatile int* abort, mpn_pair_t** out) {
  static pthread_once_t swept = PTHREAD_ONCE_INIT;
  pthread_once(&swept, sweep_once);
  char name[96];
  snprintf(name, sizeof(name), "/" PAIR_NAME_FORMAT, (unsigned long long)key, sender, receiver);
  mapping_t *found = NULL, *fresh = NULL;
  pthread_mutex_lock(&map_lock);
  ncclResult_t res = mapping_take(name, &found, &fresh);
  if (found) {
    found->refs++;
    *out = &found->pair;
  }
  pthread_mutex_unlock(&map_lock);
  if (fresh == NULL) return res;
  res = pair_setup(&fresh->pair, abort);
  pthread_mutex_lock(&map_lock);
  if (res == ncclSuccess) {
    fresh->ready = 1;
    fresh->refs = 1;
  } else {
    mapping_unlist(fresh);
  }
  pthread_cond_broadcast(&map_ready);
  pthread_mutex_unlock(&map_lock);
  if (res != ncclSuccess) {
    free(fresh);
    return res;
  }
  *out = &fresh->pair;
  return ncclSuccess;
}

/* Lets go of m's memory, device block and file mapping (after map_lock:
 * cudaFree and cudaHostUnregister may wait for the whole device, and other
 * threads mapping pairs must not wait for that).  keep: its device block
 * stays for the peer (kept_add). */
static void mapping_free(mapping_t* m, int keep) {
  if (m->pair.dflags && m->pair.created && !keep)
    mpn_cuda_forget(cudaFree((void*)m->pair.dflags));
  else if (m->pair.dflags && !m->pair.created)
    mpn_ipc_release(&m->pair.dflags_import);
  pair_mem_unmap(&m->pair);
  if (m->pair.rma_rings) m->pair.rma_rings_free(m->pair.rma_rings);
  free(m);
}

static void unmap(mpn_pair_t* pair, int elsewhere, int abandon);

void mpn_pair_unmap(mpn_pair_t* pair, int elsewhere) { unmap(pair, elsewhere, 0); }

void mpn_pair_abandon(mpn_pair_t* pair) { unmap(pair, 0, 1); }

static void unmap(mpn_pair_t* pair, int elsewhere, int abandon) {
  mapping_t* last = NULL; /* the mapping to free, when this was its last reference */
  int keep = 0;
  kept_t* gone = NULL;
  pthread_mutex_lock(&map_lock);
  for (mapping_t** pm = &mappings; *pm; pm = &(*pm)->next) {
    mapping_t* m = *pm;
    if (&m->pair != pair) continue;
    if (--m->refs == 0) {
      *pm = m->next;
      last = m;
      int unopened = m->pair.created && !__atomic_load_n(&m->pair.mem->name_gone, __ATOMIC_ACQUIRE);
      /* (a peer in this process never opens it by name: nothing to keep) */
      keep = unopened && elsewhere &&
             kept_add(m->pair.name, (void*)m->pair.dflags, m->pair.dflags_dev); /* (unopened: created here) */
      if (keep)
        MPN_INFO(MPN_SUBSYS_P2P,
                 "%s: kept for the peer, which has not opened it yet (%s device block "
                 "held until the peer takes it or this process exits)",
                 m->pair.name, m->pair.dflags ? "its" : "no");
      /* The name goes under the lock: no thread of this process may find
       * the file by it once the mapping is unlisted. */
      if (unopened && !keep) shm_unlink(m->pair.name);
    }
    break;
  }
  if (!abandon) kept_reap(&gone); /* (their frees would wait for the busy device too) */
  pthread_mutex_unlock(&map_lock);
  if (last && !abandon) mapping_free(last, keep);
  kept_free(gone);
}

/* A captured message whose slot its message MPN_PAIR_GRAPH_SLOTS before
 * still holds: that one's graph lives, on one side or both (or, taken by
 * this very capture, cannot be destroyed before this message is posted). */
static ncclResult_t graph_refuse(const mpn_slot_t* s, uint64_t seq, unsigned long long capture, int side) {
  uint64_t cur = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
  if (capture && __atomic_load_n(&s->capture[side], __ATOMIC_ACQUIRE) == capture)
    return mpn_error_set(NULL, ncclInvalidUsage,
                         "captured message %llu between two ranks finds its graph slot held by message %llu of "
                         "the same CUDA graph capture: at most %d messages between two ranks per graph",
                         (unsigned long long)seq, (unsigned long long)(cur >> 3), MPN_PAIR_GRAPH_SLOTS);
  return mpn_error_set(NULL, ncclInvalidUsage,
                       "captured message %llu between two ranks finds its graph slot held by message %llu "
                       "(state %llu; graphs gone up to message %llu on the sending side, %llu on the "
                       "receiving), whose CUDA graph is not destroyed on one side or both (at most %d captured "
                       "messages of a pair live at once)",
                       (unsigned long long)seq, (unsigned long long)(cur >> 3), (unsigned long long)(cur & 7),
                       (unsigned long long)__atomic_load_n(&s->released[MPN_SIDE_SEND], __ATOMIC_ACQUIRE),
                       (unsigned long long)__atomic_load_n(&s->released[MPN_SIDE_RECV], __ATOMIC_ACQUIRE),
                       MPN_PAIR_GRAPH_SLOTS);
}

ncclResult_t mpn_pair_post(mpn_pair_t* pair, uint64_t seq, int graph, unsigned long long capture, int side,
                           const mpn_side_t* desc, mpn_post_role_t* role) {
  mpn_slot_t* s = mpn_pair_slot(pair, seq, graph);
  uint64_t ring = graph ? MPN_PAIR_GRAPH_SLOTS : MPN_PAIR_SLOTS;
  uint64_t mine = side == MPN_SIDE_SEND ? MPN_SLOT_SEND : MPN_SLOT_RECV;
  uint64_t other = mine ^ (MPN_SLOT_SEND | MPN_SLOT_RECV);
  uint64_t cur = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
  int written = 0;
  for (;;) {
    uint64_t cur_seq = cur >> 3, flags = cur & 7, next;
    /* A graph slot also needs both graphs of its last message gone. */
    int free_slot = (cur == 0 && seq <= ring) ||
                    (cur_seq + ring == seq && flags == 7 && (!graph || mpn_pair_graph_gone(s, cur_seq)));
    uint64_t again;
    if (cur_seq == seq && !(flags & mine)) next = cur | mine;
    else if (free_slot) next = (seq << 3) | mine;
    else if ((again = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE)) != cur) { /* the peer took it meanwhile */
      cur = again;
      continue;
    } else if (graph)
      return graph_refuse(s, seq, capture, side);
    else
      return mpn_error_set(NULL, ncclInvalidUsage,
                           "more than %d messages outstanding between two ranks (message %llu "
                           "finds its slot busy)",
                           MPN_PAIR_SLOTS, (unsigned long long)seq);
    /* Only this side writes side[side], and the slot is ours now: the
     * descriptor is published by the release of the exchange below. */
    if (!written) s->side[side] = *desc;
    written = 1;
    if (__atomic_compare_exchange_n(&s->state, &cur, next, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      if (graph) __atomic_store_n(&s->capture[side], capture, __ATOMIC_RELEASE);
      *role = cur_seq == seq && (flags & other) ? MPN_POST_SECOND : MPN_POST_FIRST;
      return ncclSuccess;
    }
  }
}

void mpn_pair_graph_released(uint64_t gen, int kind, uint32_t slot, uint64_t seq, int side) {
  released_t* r = malloc(sizeof(*r));
  if (r == NULL) return; /* the slot stays held */
  __atomic_add_fetch(&filed, 1, __ATOMIC_RELAXED);
  *r = (released_t){.gen = gen, .seq = seq, .kind = kind, .side = side, .slot = slot};
  r->next = __atomic_load_n(&released_news, __ATOMIC_ACQUIRE);
  while (!__atomic_compare_exchange_n(&released_news, &r->next, r, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
}

/* Under map_lock. */
static void reap_locked(void) {
  released_t* r = __atomic_exchange_n(&released_news, NULL, __ATOMIC_ACQ_REL);
  while (r) {
    released_t* next = r->next;
    mapping_t* m = mappings;
    while (m && m->pair.gen != r->gen) m = m->next;
    if (m) { /* else the pair went with its communicator */
      /* Raised, never lowered: news of an older message may come late. */
      uint64_t* word = r->kind == MPN_GRAPH_RMA
                           ? &m->pair.mem->rma_graph_released[r->slot % MPN_PAIR_RMA_GRAPH][r->side]
                           : &m->pair.mem->graph_slots[r->slot % MPN_PAIR_GRAPH_SLOTS].released[r->side];
      uint64_t cur = __atomic_load_n(word, __ATOMIC_ACQUIRE);
      while (cur < r->seq && !__atomic_compare_exchange_n(word, &cur, r->seq, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {}
      __atomic_add_fetch(&marked, 1, __ATOMIC_RELAXED);
    } else {
      __atomic_add_fetch(&orphaned, 1, __ATOMIC_RELAXED);
    }
    free(r);
    r = next;
  }
}

void mpn_pair_graph_reap(void) {
  if (__atomic_load_n(&released_news, __ATOMIC_ACQUIRE) == NULL) return;
  pthread_mutex_lock(&map_lock);
  reap_locked();
  pthread_mutex_unlock(&map_lock);
}

void mpn_pair_graph_reap_try(void) {
  if (__atomic_load_n(&released_news, __ATOMIC_ACQUIRE) == NULL || pthread_mutex_trylock(&map_lock) != 0) return;
  reap_locked();
  pthread_mutex_unlock(&map_lock);
}

int mpn_pair_kept(void) {
  pthread_mutex_lock(&map_lock);
  int n = 0;
  for (kept_t* k = kept; k; k = k->next) n++;
  pthread_mutex_unlock(&map_lock);
  return n;
}

void mpn_pair_forget_device(int dev) {
  pthread_mutex_lock(&map_lock);
  for (kept_t* k = kept; k; k = k->next)
    if (k->dflags && k->dev == dev) k->dflags = NULL;
  pthread_mutex_unlock(&map_lock);
}

void mpn_pair_stamp(mpn_pair_mem_t* mem) {
  mpn_pair_creator_t* c = &mem->creator;
  c->pid = (int32_t)getpid();
  c->pidns = mpn_proc_pidns();
  c->start_time = mpn_proc_start_time(c->pid);
  if (c->pidns != 0) __atomic_store_n(&c->magic, MPN_PAIR_MAGIC, __ATOMIC_RELEASE);
}

/* Whether an entry of PAIR_SHM_DIR is named exactly as a pair file. */
static int pair_name_ours(const char* entry) {
  unsigned long long key;
  int sender, receiver, end = 0;
  char again[96];
  if (sscanf(entry, "mpinccl-%16llx-%d-%d%n", &key, &sender, &receiver, &end) != 3 || entry[end] != '\0') return 0;
  snprintf(again, sizeof(again), PAIR_NAME_FORMAT, key, sender, receiver);
  return strcmp(again, entry) == 0;
}

/* Entry name of dir: -1 if not a pair file of this user (name, owner, type,
 * size), else 1 if its creator, of this PID namespace, is gone (*pid: its
 * pid; *file: the file judged), 0 if it lives or cannot be judged.  Files of
 * others are not even opened. */
static int pair_stale(int dir, const char* name, uint64_t pidns, int* pid, struct stat* file) {
  struct stat st;
  if (!pair_name_ours(name) || fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
      st.st_uid != geteuid() || st.st_size != (off_t)sizeof(mpn_pair_mem_t))
    return -1;
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  const size_t head = offsetof(mpn_pair_mem_t, rma_signal);
  void* mem =
      fstat(fd, file) == 0 && file->st_ino == st.st_ino ? mmap(NULL, head, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (mem == MAP_FAILED) return 0;
  const mpn_pair_creator_t* c = &((const mpn_pair_mem_t*)mem)->creator;
  int stale = creator_gone(c, pidns);
  *pid = c->pid;
  munmap(mem, head);
  return stale;
}

int mpn_pair_sweep(void) {
  uint64_t pidns = mpn_proc_pidns();
  DIR* d = pidns != 0 ? opendir(PAIR_SHM_DIR) : NULL;
  if (d == NULL) {
    MPN_INFO(MPN_SUBSYS_P2P, "stale pair files in %s not looked for: %s", PAIR_SHM_DIR,
             pidns != 0 ? strerror(errno) : "PID namespace unknown");
    return 0;
  }
  int removed = 0, left = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    int pid = 0;
    struct stat judged, now;
    int stale = pair_stale(dirfd(d), e->d_name, pidns, &pid, &judged);
    if (stale < 0) continue;
    /* Only the very file judged: its name may have been taken meanwhile. */
    if (stale && fstatat(dirfd(d), e->d_name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == judged.st_ino &&
        now.st_dev == judged.st_dev && unlinkat(dirfd(d), e->d_name, 0) == 0) {
      MPN_INFO(MPN_SUBSYS_P2P, "%s/%s removed: the process that made it (pid %d) is gone", PAIR_SHM_DIR, e->d_name,
               pid);
      removed++;
    } else {
      left++;
    }
  }
  closedir(d);
  MPN_INFO(MPN_SUBSYS_P2P, "stale pair files: %d removed from %s, %d left (creator alive or not judged)", removed,
           PAIR_SHM_DIR, left);
  return removed;
}

void mpn_pair_graph_counts(mpn_graph_stats_t* out) {
  out->filed = __atomic_load_n(&filed, __ATOMIC_RELAXED);
  out->marked = __atomic_load_n(&marked, __ATOMIC_RELAXED);
  out->orphaned = __atomic_load_n(&orphaned, __ATOMIC_RELAXED);
}

void mpn_pair_consume(mpn_pair_t* pair, uint64_t seq, int graph) {
  mpn_slot_t* s = mpn_pair_slot(pair, seq, graph);
  __atomic_fetch_or(&s->state, (uint64_t)MPN_SLOT_DONE, __ATOMIC_RELEASE);
}

void mpn_pair_report(mpn_pair_t* pair, int to_side, ncclResult_t code, const char* text) {
  for (int side = 0; side < 2; side++) {
    if (to_side != MPN_PAIR_TO_BOTH && side != to_side) continue;
    mpn_pair_error_t* e = &pair->mem->error[side];
    snprintf(e->text, sizeof(e->text), "%s", text);
    __atomic_store_n(&e->code, (uint32_t)code, __ATOMIC_RELAXED);
    __atomic_fetch_add(&e->count, 1, __ATOMIC_RELEASE);
  }
}

/* Device flags and signals are written with copies on the device's service
 * stream, which depends on no stream that may be waiting. */
static void pair_release_device(mpn_pair_t* pair) {
  uint64_t values[MPN_PAIR_FLAGS]; /* (12 KiB; the watchdog and an abort may release at once) */
  for (int i = 0; i < MPN_PAIR_FLAGS; i++)
    values[i] = i < 2 * MPN_PAIR_SLOTS ? UINT64_MAX >> 1 : MPN_PAIR_GRAPH_RELEASED;
  cudaStream_t s = mpn_cuda_service_stream(mpn_cuda_current_device());
  if (s == NULL) {
    MPN_WARN("cannot release the device flags of %s", pair->name);
    return;
  }
  mpn_cuda_forget(cudaMemcpyAsync((void*)pair->dflags, values, sizeof(values), cudaMemcpyHostToDevice, s));
  uint64_t signals[MPN_PAIR_RMA_CTX];
  for (int i = 0; i < MPN_PAIR_RMA_CTX; i++) signals[i] = UINT64_MAX >> 1;
  mpn_cuda_forget(
      cudaMemcpyAsync((void*)mpn_pair_signal(pair, 0), signals, sizeof(signals), cudaMemcpyHostToDevice, s));
  mpn_cuda_forget(cudaStreamSynchronize(s));
}

void mpn_pair_release(mpn_pair_t* pair) {
  if (pair == NULL) return;
  for (int i = 0; i < MPN_PAIR_RMA_CTX; i++)
    __atomic_store_n(&pair->mem->rma_signal[i], UINT64_MAX >> 1, __ATOMIC_RELEASE);
  for (int i = 0; i < MPN_PAIR_RMA_GRAPH; i++) {
    __atomic_store_n(&pair->mem->rma_graph_signal[i], 1, __ATOMIC_RELEASE);
    __atomic_store_n(&pair->mem->rma_graph_busy[i], 0, __ATOMIC_RELEASE);
  }
  if (pair->dflags) {
    pair_release_device(pair);
    return;
  }
  for (int i = 0; i < MPN_PAIR_SLOTS; i++) {
    __atomic_store_n(&pair->mem->slots[i].ready, UINT64_MAX >> 1, __ATOMIC_RELEASE);
    __atomic_store_n(&pair->mem->slots[i].done, UINT64_MAX >> 1, __ATOMIC_RELEASE);
  }
  for (int i = 0; i < MPN_PAIR_GRAPH_SLOTS; i++) {
    __atomic_store_n(&pair->mem->graph_slots[i].ready, MPN_PAIR_GRAPH_RELEASED, __ATOMIC_RELEASE);
    __atomic_store_n(&pair->mem->graph_slots[i].done, MPN_PAIR_GRAPH_RELEASED, __ATOMIC_RELEASE);
  }
}
