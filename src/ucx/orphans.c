/*
 * orphans.c - one process-wide list of captured state kept for graphs
 * that outlived its communicator (orphans.h), under a lock of its own.
 */
#include "ucx/orphans.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct orphan {
  mpn_ucx_gone_t* mark;
  mpn_ucx_orphan_free_fn fn;
  void* obj;
  struct orphan* next;
} orphan_t;

static orphan_t* kept;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

int mpn_ucx_orphan_keep(mpn_ucx_gone_t* mark, mpn_ucx_orphan_free_fn fn, void* obj) {
  orphan_t* o = malloc(sizeof(*o));
  if (o == NULL) return 0;
  *o = (orphan_t){.mark = mark, .fn = fn, .obj = obj};
  pthread_mutex_lock(&kept_lock);
  o->next = kept;
  kept = o;
  pthread_mutex_unlock(&kept_lock);
  return 1;
}

void mpn_ucx_orphans_reap(void) {
  orphan_t* gone = NULL;
  pthread_mutex_lock(&kept_lock);
  for (orphan_t** at = &kept; *at;) {
    orphan_t* o = *at;
    if (!mpn_ucx_gone_is(o->mark)) {
      at = &o->next;
      continue;
    }
    *at = o->next;
    o->next = gone;
    gone = o;
  }
  pthread_mutex_unlock(&kept_lock);
  for (orphan_t *o = gone, *next; o; o = next) { /* (CUDA calls: out of the lock) */
    next = o->next;
    o->fn(o->obj);
    free(o);
  }
}

int mpn_ucx_orphans_count(void) {
  mpn_ucx_orphans_reap();
  int n = 0;
  pthread_mutex_lock(&kept_lock);
  for (const orphan_t* o = kept; o; o = o->next) n++;
  pthread_mutex_unlock(&kept_lock);
  return n;
}
