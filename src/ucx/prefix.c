/*
 * prefix.c - the tag prefixes held by this process's live UCX communicators
 * (ucx/net.c agrees on one per communicator over all its ranks).  A short
 * list under a mutex: communicators are few, and made and freed rarely.
 * The prefixes of the last RECENT communicators freed stay out of use too:
 * messages a freed communicator never received stay among UCX's unexpected
 * ones in the worker, and a new communicator with its prefix could take them.
 */
#include "ucx/prefix.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/debug.h"
#include "core/error.h"

typedef struct {
  uint32_t prefix;
  uint64_t key; /* the bootstrap key of the communicator that holds it */
  int holds;    /* its ranks in this process that hold it */
} held_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static held_t* held; /* n entries, in no order */
static size_t n, cap;

enum { RECENT = MPN_UCX_PREFIX_RECENT };
static held_t recent[RECENT]; /* prefixes freed last (holds unused), a ring */
static size_t freed;          /* how many were ever freed: the ring's next entry is freed % RECENT */

#define PREFIX_MASK ((1u << MPN_UCX_PREFIX_BITS) - 1)

uint32_t mpn_ucx_prefix_candidate(uint64_t key, int attempt) {
  uint64_t k = key;
  if (attempt > 0) { /* splitmix64's finalizer of key and attempt */
    k = key + (uint64_t)attempt * 0x9e3779b97f4a7c15ull;
    k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
    k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
    k ^= k >> 31;
  }
  return (uint32_t)((k ^ (k >> MPN_UCX_PREFIX_BITS)) & PREFIX_MASK);
}

/* The entry of prefix (any key), or NULL; under the lock.  A prefix has at
 * most one entry: a second key is refused (mpn_ucx_prefix_reserve). */
static held_t* held_find(uint32_t prefix) {
  for (size_t i = 0; i < n; i++)
    if (held[i].prefix == prefix) return &held[i];
  return NULL;
}

/* Room for one more entry; 0 when out of memory.  Under the lock. */
static int held_room(void) {
  if (n < cap) return 1;
  size_t more = cap ? 2 * cap : 16;
  held_t* grown = realloc(held, more * sizeof(*held));
  if (grown == NULL) return 0;
  held = grown;
  cap = more;
  return 1;
}

/* Whether another key freed prefix lately; under the lock. */
static int recent_other(uint32_t prefix, uint64_t key) {
  for (size_t i = 0; i < RECENT && i < freed; i++)
    if (recent[i].prefix == prefix && recent[i].key != key) return 1;
  return 0;
}

ncclResult_t mpn_ucx_prefix_reserve(uint32_t prefix, uint64_t key, int* taken) {
  pthread_mutex_lock(&lock);
  held_t* h = held_find(prefix);
  int other = (h && h->key != key) || (!h && recent_other(prefix, key));
  int room = other || h || held_room();
  if (h && !other)
    h->holds++;
  else if (!h && !other && room)
    held[n++] = (held_t){.prefix = prefix, .key = key, .holds = 1};
  pthread_mutex_unlock(&lock);
  if (!room) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  *taken = other;
  return ncclSuccess;
}

void mpn_ucx_prefix_release(uint32_t prefix, uint64_t key) {
  pthread_mutex_lock(&lock);
  held_t* h = held_find(prefix);
  int mine = h && h->key == key;
  if (mine && --h->holds == 0) {
    recent[freed++ % RECENT] = *h;
    *h = held[--n];
    if (n == 0) { /* (nothing left over at the process's exit) */
      free(held);
      held = NULL;
      cap = 0;
    }
  }
  pthread_mutex_unlock(&lock);
  if (!mine)
    MPN_WARN("UCX: tag prefix 0x%06x released by key %llx, which does not hold it", prefix, (unsigned long long)key);
}
