/*
 * winshare.c - counts of the live windows that name each peer allocation
 * this process may import (winshare.h).  Few entries: one per peer
 * allocation under a window, so a list scanned under one lock does.
 */
#include "rma/winshare.h"

#include <pthread.h>
#include <stdlib.h>

#include "cuda/ipc.h"

typedef struct {
  uint64_t owner, buffer_id;
  int dev;
  int windows; /* live windows naming it */
} share_t;

static share_t* shares;
static int n_shares, cap_shares;
static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;

static share_t* share_find(uint64_t owner, uint64_t buffer_id, int dev) {
  for (int i = 0; i < n_shares; i++)
    if (shares[i].owner == owner && shares[i].buffer_id == buffer_id && shares[i].dev == dev) return &shares[i];
  return NULL;
}

int mpn_win_share_take(uint64_t owner, uint64_t buffer_id, int dev) {
  pthread_mutex_lock(&share_lock);
  share_t* s = share_find(owner, buffer_id, dev);
  if (s == NULL && n_shares == cap_shares) {
    int cap = cap_shares ? 2 * cap_shares : 16;
    share_t* grown = realloc(shares, (size_t)cap * sizeof(*grown));
    if (grown != NULL) shares = grown, cap_shares = cap;
  }
  if (s == NULL && n_shares < cap_shares) {
    s = &shares[n_shares++];
    *s = (share_t){.owner = owner, .buffer_id = buffer_id, .dev = dev};
  }
  if (s != NULL) s->windows++;
  pthread_mutex_unlock(&share_lock);
  return s != NULL;
}

/* Whether a live window names the allocation (under share_lock). */
static int share_kept(uint64_t owner, uint64_t buffer_id, int dev) { return share_find(owner, buffer_id, dev) != NULL; }

void mpn_win_share_drop(uint64_t owner, uint64_t buffer_id, int dev, int taken) {
  pthread_mutex_lock(&share_lock);
  share_t* s = share_find(owner, buffer_id, dev);
  if (s != NULL && taken && --s->windows == 0) {
    *s = shares[--n_shares];
    s = NULL;
  }
  /* Forgotten under the lock: a window that takes the allocation meanwhile
   * counts after the forget, and its first put imports it again.  Another
   * allocation under a window that the driver mapped in the same mapping
   * keeps it open. */
  if (s == NULL) mpn_ipc_forget(owner, buffer_id, dev, share_kept);
  pthread_mutex_unlock(&share_lock);
}

int mpn_win_share_count(uint64_t owner, uint64_t buffer_id, int dev) {
  pthread_mutex_lock(&share_lock);
  const share_t* s = share_find(owner, buffer_id, dev);
  int n = s ? s->windows : 0;
  pthread_mutex_unlock(&share_lock);
  return n;
}
