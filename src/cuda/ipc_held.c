/*
 * ipc_held.c - this process's list of held imports, in a file of /dev/shm
 * named after the process (PID namespace, pid, start time), so that readers
 * and the sweep need nothing but the name.  One writer at a time (a lock);
 * readers in other processes take a consistent copy through a sequence
 * word, odd while the list changes.
 */
#include "cuda/ipc_held.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/debug.h"
#include "core/proc.h"

#define HELD_DIR "/dev/shm"
#define HELD_NAME_FORMAT "mpinccl-held-%016llx-%d-%llu"

typedef struct {
  uint64_t owner, base, size;
  int64_t dev;
} held_entry_t;

typedef struct {
  uint64_t seq;      /* odd while the writer changes the list */
  uint64_t n;        /* entries listed */
  uint64_t overflow; /* opens that did not fit */
  held_entry_t entries[MPN_IPC_HELD_MAX];
} held_file_t;

static held_file_t* mine; /* NULL: not published */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
/* The process that published mine, under publish_lock: a forked child
 * publishes a list of its own. */
static pthread_mutex_t publish_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t tried_pid, my_pid;
static char my_name[104];

mpn_ipc_held_proc_t mpn_ipc_held_self(void) {
  mpn_ipc_held_proc_t me = {.pidns = mpn_proc_pidns(), .pid = (int)getpid()};
  me.start_time = mpn_proc_start_time(me.pid);
  return me;
}

void mpn_ipc_held_name(const mpn_ipc_held_proc_t* peer, char* name, size_t len) {
  snprintf(name, len, HELD_NAME_FORMAT, (unsigned long long)peer->pidns, peer->pid,
           (unsigned long long)peer->start_time);
}

/* Whether entry is named exactly as a held file; *who: whose. */
static int held_name_parse(const char* entry, mpn_ipc_held_proc_t* who) {
  unsigned long long ns, start;
  int pid, end = 0;
  char again[96];
  if (sscanf(entry, "mpinccl-held-%16llx-%d-%llu%n", &ns, &pid, &start, &end) != 3 || entry[end] != '\0') return 0;
  *who = (mpn_ipc_held_proc_t){.pidns = ns, .start_time = start, .pid = pid};
  mpn_ipc_held_name(who, again, sizeof(again));
  return strcmp(again, entry) == 0;
}

int mpn_ipc_held_sweep(void) {
  uint64_t pidns = mpn_proc_pidns();
  DIR* d = pidns != 0 ? opendir(HELD_DIR) : NULL;
  if (d == NULL) return 0;
  int removed = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    mpn_ipc_held_proc_t who;
    struct stat st;
    if (!held_name_parse(e->d_name, &who) || who.pidns != pidns ||
        fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != geteuid() ||
        !mpn_proc_gone(who.pid, who.start_time))
      continue;
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) removed++;
  }
  closedir(d);
  if (removed) MPN_INFO(MPN_SUBSYS_IPC, "%d lists of imports of gone processes removed from %s", removed, HELD_DIR);
  return removed;
}

static void held_unlink(void) {
  if (pthread_mutex_trylock(&held_lock) != 0) return; /* (another thread is in the list: left to the sweep) */
  if (my_pid != 0 && getpid() == my_pid) shm_unlink(my_name);
  pthread_mutex_unlock(&held_lock);
}

static void publish(void) {
  mpn_ipc_held_proc_t me = mpn_ipc_held_self();
  if (me.pidns == 0) {
    MPN_INFO(MPN_SUBSYS_IPC, "imports not published: PID namespace unknown");
    return;
  }
  mpn_ipc_held_sweep();
  char name[96];
  mpn_ipc_held_name(&me, name, sizeof(name));
  int fd = shm_open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
  void* mem = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)sizeof(held_file_t)) == 0)
    mem = mmap(NULL, sizeof(held_file_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  if (fd >= 0) close(fd);
  if (mem == MAP_FAILED) {
    if (fd >= 0) shm_unlink(name);
    MPN_WARN(
        "the list of CUDA IPC imports of this process cannot be published in %s/%s (%s): a peer "
        "that frees and reallocates buffers this process maps may wait for it (docs/P2P.md, known "
        "problem 17)",
        HELD_DIR, name, strerror(err));
    return;
  }
  static int registered;
  if (!registered) registered = atexit(held_unlink) == 0;
  pthread_mutex_lock(&held_lock);
  snprintf(my_name, sizeof(my_name), "/%s", name);
  my_pid = me.pid;
  mine = mem;
  pthread_mutex_unlock(&held_lock);
}

void mpn_ipc_held_publish(void) {
  pid_t pid = getpid();
  pthread_mutex_lock(&publish_lock);
  if (tried_pid != pid) {
    tried_pid = pid;
    publish();
  }
  pthread_mutex_unlock(&publish_lock);
}

/* The writer's side of the sequence word: odd while changing. */
static void held_begin(held_file_t* f) {
  __atomic_store_n(&f->seq, f->seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}
static void held_end(held_file_t* f) { __atomic_store_n(&f->seq, f->seq + 1, __ATOMIC_RELEASE); }

static void entry_store(held_entry_t* to, const held_entry_t* from) {
  __atomic_store_n(&to->owner, from->owner, __ATOMIC_RELAXED);
  __atomic_store_n(&to->base, from->base, __ATOMIC_RELAXED);
  __atomic_store_n(&to->size, from->size, __ATOMIC_RELAXED);
  __atomic_store_n(&to->dev, from->dev, __ATOMIC_RELAXED);
}

/* This process's list, or NULL; a forked child has none of its own (the
 * parent's mapping is shared: it must not write there). */
static held_file_t* mine_locked(void) { return mine && getpid() == my_pid ? mine : NULL; }

void mpn_ipc_held_add(const mpn_ipc_closing_t* c) {
  mpn_ipc_held_publish();
  pthread_mutex_lock(&held_lock);
  held_file_t* f = mine_locked();
  if (f) {
    held_begin(f);
    if (f->n < MPN_IPC_HELD_MAX) {
      held_entry_t e = {c->owner, c->base, c->size, c->dev};
      entry_store(&f->entries[f->n], &e);
      __atomic_store_n(&f->n, f->n + 1, __ATOMIC_RELAXED);
    } else {
      __atomic_store_n(&f->overflow, f->overflow + 1, __ATOMIC_RELAXED);
    }
    held_end(f);
  }
  pthread_mutex_unlock(&held_lock);
}

void mpn_ipc_held_remove(const mpn_ipc_closing_t* c) {
  pthread_mutex_lock(&held_lock);
  held_file_t* f = mine_locked();
  if (f) {
    held_begin(f);
    uint64_t i = 0;
    while (i < f->n && !(f->entries[i].owner == c->owner && f->entries[i].base == c->base &&
                         f->entries[i].size == c->size && f->entries[i].dev == c->dev))
      i++;
    if (i < f->n) {
      entry_store(&f->entries[i], &f->entries[f->n - 1]);
      __atomic_store_n(&f->n, f->n - 1, __ATOMIC_RELAXED);
    } else if (f->overflow > 0) { /* one of those that did not fit */
      __atomic_store_n(&f->overflow, f->overflow - 1, __ATOMIC_RELAXED);
    }
    held_end(f);
  }
  pthread_mutex_unlock(&held_lock);
}

void mpn_ipc_held_forget(int dev) {
  pthread_mutex_lock(&held_lock);
  held_file_t* f = mine_locked();
  if (f) {
    held_begin(f);
    for (uint64_t i = 0; i < f->n;)
      if (f->entries[i].dev == dev) {
        entry_store(&f->entries[i], &f->entries[f->n - 1]);
        __atomic_store_n(&f->n, f->n - 1, __ATOMIC_RELAXED);
      } else {
        i++;
      }
    held_end(f);
  }
  pthread_mutex_unlock(&held_lock);
}

int mpn_ipc_held_count(void) {
  pthread_mutex_lock(&held_lock);
  const held_file_t* f = mine_locked();
  int n = f ? (int)(f->n + f->overflow) : 0;
  pthread_mutex_unlock(&held_lock);
  return n;
}

/* Peers' files, mapped read-only once found (kept for the process's life:
 * one per peer process of the host). */
typedef struct peer_file {
  struct peer_file* next;
  mpn_ipc_held_proc_t who;
  const held_file_t* f;
} peer_file_t;
static peer_file_t* peers;
static pthread_mutex_t peers_lock = PTHREAD_MUTEX_INITIALIZER;

static const held_file_t* peer_file(const mpn_ipc_held_proc_t* who) {
  pthread_mutex_lock(&peers_lock);
  peer_file_t* p = peers;
  while (p && !(p->who.pid == who->pid && p->who.pidns == who->pidns && p->who.start_time == who->start_time))
    p = p->next;
  const held_file_t* f = p ? p->f : NULL;
  pthread_mutex_unlock(&peers_lock);
  if (f || who->pidns == 0) return f;
  char name[96];
  mpn_ipc_held_name(who, name, sizeof(name));
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd < 0) return NULL; /* not published (yet): it holds nothing */
  struct stat st;
  void* mem = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(held_file_t))
    mem = mmap(NULL, sizeof(held_file_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  p = mem != MAP_FAILED ? calloc(1, sizeof(*p)) : NULL;
  if (p == NULL) {
    if (mem != MAP_FAILED) munmap(mem, sizeof(held_file_t));
    return NULL;
  }
  p->who = *who;
  p->f = mem;
  pthread_mutex_lock(&peers_lock);
  p->next = peers;
  peers = p;
  pthread_mutex_unlock(&peers_lock);
  return mem;
}

/* Tries at a consistent copy before a reader gives up and assumes the worst. */
#define HELD_READ_TRIES 1000

int mpn_ipc_held_in_way(const mpn_ipc_held_proc_t* peer, uint64_t owner, uint64_t base, uint64_t size) {
  const held_file_t* f = peer_file(peer);
  if (f == NULL) return 0;
  for (int tries = 0; tries < HELD_READ_TRIES; tries++) {
    uint64_t seq = __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE);
    if (seq & 1) {
      sched_yield();
      continue;
    }
    int way = __atomic_load_n(&f->overflow, __ATOMIC_RELAXED) != 0;
    uint64_t n = __atomic_load_n(&f->n, __ATOMIC_RELAXED);
    for (uint64_t i = 0; i < n && i < MPN_IPC_HELD_MAX && !way; i++) {
      const held_entry_t* e = &f->entries[i];
      uint64_t b = __atomic_load_n(&e->base, __ATOMIC_RELAXED), s = __atomic_load_n(&e->size, __ATOMIC_RELAXED);
      way = __atomic_load_n(&e->owner, __ATOMIC_RELAXED) == owner && mpn_ipc_ranges_overlap(b, s, base, size) &&
            !(b == base && s == size);
    }
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&f->seq, __ATOMIC_RELAXED) == seq) return way;
  }
  return 1;
}
