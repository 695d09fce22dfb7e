/*
 * ipc.c - export and import caches.  Both are small arrays scanned linearly
 * under one lock: a process exchanges with few allocations; a hash replaces
 * them when profiles say so.
 */
#include "cuda/ipc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/param.h"
#include "cuda/device.h"
#include "cuda/buffer.h"
#include "cuda/driver.h"
#include "cuda/ipc_closer.h"
#include "cuda/ipc_held.h"

typedef struct {
  uint64_t owner, buffer_id;
  int dev; /* importing device: a mapping belongs to one context */
  cudaIpcMemHandle_t handle;
  void* base;          /* exported: the allocation; imported: where it is mapped here */
  uint64_t owner_base; /* imported: the owner's address of what base maps */
  uint64_t size;       /* the allocation's size */
  void* mapping;       /* imported: what cudaIpcOpenMemHandle returned, shared by borrowers */
  int opened;          /* imported: this entry opened mapping and closes it */
  mpn_ipc_closing_t opened_as; /* imported, opened: the open it closes (the range and handle
                          opened, which a borrower that took the open over does not have) */
  int pending;         /* imported: handed out this many times, copies not yet issued */
  int pinned;          /* imported: never known idle again, never closed (but by mpn_ipc_release) */
  int graph_pins;      /* imported: CUDA graphs holding it open, until their news (mpn_ipc_pin_gone) */
  uint64_t serial;     /* imported: this entry's own number, which a pin names */
  int pool;            /* exported: a memory-pool allocation, which has no handle */
  int forget;          /* imported: to be closed once idle (mpn_ipc_forget) */
  int stale;           /* imported: forgotten as a freed allocation's mapping, for good (use
                          does not take it back: a new allocation may lie at its addresses) */
  cudaEvent_t used[MPN_IPC_USED_EVENTS]; /* imported: per stream that used it, an event recorded
                          after its last copies (the caller's, recorded again later: a later
                          record only makes the import look busy longer); NULL: none */
} ipc_entry_t;

typedef struct {
  ipc_entry_t* entries;
  int n, cap;
} ipc_cache_t;

static ipc_cache_t exported, imported;
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_serial; /* under ipc_lock */

/* A graph's hold on an import, until the news that the graph is gone. */
enum { PIN_HELD, PIN_GONE, PIN_KEPT };
struct mpn_ipc_pin {
  uint64_t serial; /* the entry it holds */
  int news;        /* PIN_*: set on CUDA's thread (no lock there) */
  struct mpn_ipc_pin* next;
};
static mpn_ipc_pin_t* pins; /* under ipc_lock */
static void reap_pins(void);

/* Whether a copy issued with e may still run: one of its events is not
 * complete (a failed query counts as not complete). */
static int events_busy(const ipc_entry_t* e) {
  for (int k = 0; k < MPN_IPC_USED_EVENTS; k++) {
    if (e->used[k] == NULL) continue;
    cudaError_t err = cudaEventQuery(e->used[k]);
    if (err == cudaSuccess) continue;
    mpn_cuda_forget(err);
    return 1;
  }
  return 0;
}

static ipc_entry_t* cache_find(ipc_cache_t* c, uint64_t owner, uint64_t id, int dev) {
  for (int i = 0; i < c->n; i++)
    if (c->entries[i].owner == owner && c->entries[i].buffer_id == id && c->entries[i].dev == dev)
      return &c->entries[i];
  return NULL;
}

/* Room for one more entry; 0 when out of memory. */
static int cache_reserve(ipc_cache_t* c) {
  if (c->n < c->cap) return 1;
  int cap = c->cap ? 2 * c->cap : 64;
  ipc_entry_t* grown = realloc(c->entries, (size_t)cap * sizeof(*grown));
  if (grown == NULL) return 0;
  c->entries = grown;
  c->cap = cap;
  return 1;
}

static ipc_entry_t* cache_add(ipc_cache_t* c, const ipc_entry_t* e) {
  if (!cache_reserve(c)) return NULL;
  c->entries[c->n] = *e;
  c->entries[c->n].serial = ++next_serial;
  return &c->entries[c->n++];
}

/* The cached export of an allocation, or a new one; allocations from a
 * memory pool or CUDA's virtual memory API are remembered as such (legacy
 * CUDA IPC cannot share them). */
static ncclResult_t export_entry(uint64_t id, const void* ptr, const char* what, ipc_entry_t* out) {
  pthread_mutex_lock(&ipc_lock);
  ipc_entry_t* e = cache_find(&exported, 0, id, -1);
  if (e) *out = *e;
  pthread_mutex_unlock(&ipc_lock);
  if (e) return ncclSuccess;
  const mpn_driver_t* drv;
  MPN_CHECK(mpn_driver_get(&drv));
  CUdeviceptr base = 0;
  size_t size = 0;
  CUmemoryPool pool = NULL;
  if (drv->mem_get_address_range(&base, &size, (CUdeviceptr)ptr) != CUDA_SUCCESS)
    return mpn_error_set(NULL, ncclInvalidArgument, "%s %p is not CUDA device memory", what, ptr);
  ipc_entry_t fresh = {.owner = 0, .buffer_id = id, .dev = -1, .base = (void*)base, .size = size};
  if ((drv->pointer_get_attribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, (CUdeviceptr)ptr) == CUDA_SUCCESS &&
       pool != NULL) ||
      mpn_cuda_is_vmm(drv, (CUdeviceptr)ptr)) {
    fresh.pool = 1; /* (staged: see mpn_ipc_export) */
  } else {
    /* The caller's stream may be capturing a graph: not part of it. */
    mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
    cudaError_t err = cudaIpcGetMemHandle(&fresh.handle, (void*)base);
    mpn_cuda_relaxed_leave(mode);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return mpn_error_set(NULL, ncclInvalidUsage,
                           "%s %p cannot be shared with another process (%s); allocate it with "
                           "cudaMalloc or ncclMemAlloc",
                           what, ptr, cudaGetErrorString(err));
    }
  }
  pthread_mutex_lock(&ipc_lock);
  e = cache_find(&exported, 0, id, -1); /* another thread may have added it */
  if (e == NULL) {
    /* Allocations that overlapped this one were freed: their entries go, so
     * that a program allocating afresh for each message does not grow the
     * cache (and its scans) for good. */
    for (int i = 0; i < exported.n;)
      if (mpn_ipc_ranges_overlap((uint64_t)(uintptr_t)exported.entries[i].base, exported.entries[i].size, base, size))
        exported.entries[i] = exported.entries[--exported.n];
      else
        i++;
    e = cache_add(&exported, &fresh);
  }
  if (e) *out = *e;
  pthread_mutex_unlock(&ipc_lock);
  return e ? ncclSuccess : mpn_error_set(NULL, ncclSystemError, "out of memory");
}

ncclResult_t mpn_ipc_export(const void* ptr, const char* what, mpn_ipc_desc_t* out, int* pool) {
  const mpn_driver_t* drv;
  MPN_CHECK(mpn_driver_get(&drv));
  unsigned long long id = 0;
  if (drv->pointer_get_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)ptr) != CUDA_SUCCESS)
    return mpn_error_set(NULL, ncclInvalidArgument, "%s %p is not CUDA device memory", what, ptr);
  ipc_entry_t e;
  memset(&e, 0, sizeof(e));
  MPN_CHECK(export_entry(id, ptr, what, &e));
  *pool = e.pool;
  out->buffer_id = id;
  out->base = (uint64_t)(uintptr_t)e.base;
  out->offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)e.base);
  out->size = e.size;
  out->handle = e.handle;
  return ncclSuccess;
}

ncclResult_t mpn_ipc_export_own(ncclComm_t comm, const char* who, const void* ptr, const char* what,
                                mpn_ipc_desc_t* out) {
  int pool = 0;
  MPN_CHECK(mpn_ipc_export(ptr, what, out, &pool));
  if (pool) /* (no descriptor then) */
    return mpn_error_set(comm, ncclInvalidUsage, "%s: CUDA IPC cannot share %s %p (memory from cudaMalloc)", who, what,
                         ptr);
  return ncclSuccess;
}

/* Hands e's open to the closing thread: the driver's close waits for all
 * of this process's GPU work, which may wait for peers that wait for this
 * host (docs/P2P.md, known problem 17). */
static void close_later(const ipc_entry_t* e, const char* why) {
  MPN_TRACE(MPN_SUBSYS_IPC, "closing %s import of buffer %llu at %p (closing thread)", why,
            (unsigned long long)e->buffer_id, e->mapping);
  mpn_ipc_closer_push(&e->opened_as);
}

/*
 * Closes one mapping and forgets every entry that uses it.  The driver
 * counts opens of one handle (a freed allocation's handle comes back for a
 * new allocation of the same memory, and opening it again returns the same
 * mapping), so the mapping is closed once for every entry that opened it;
 * closing it fewer times would leave it mapped with nothing here knowing.
 */
static void close_mapping(void* mapping, const char* why) {
  for (int j = 0; j < imported.n;) {
    ipc_entry_t* e = &imported.entries[j];
    if (e->mapping != mapping) {
      j++;
      continue;
    }
    if (e->opened) close_later(e, why);
    *e = imported.entries[--imported.n];
  }
}

/*
 * Forgets the imports that a new allocation of owner, desc, proves stale:
 * those of allocations that overlapped it in the owner's address space, and
 * those opened through the same handle (the driver recycles the memory of a
 * freed allocation, handle and all, while this process still maps it).  The
 * owner freed them.  Their mappings are closed, with every entry that
 * borrowed one.
 */
static void drop_stale(uint64_t owner, int dev, const mpn_ipc_desc_t* desc) {
  for (int i = 0; i < imported.n; i++) {
    ipc_entry_t* e = &imported.entries[i];
    if (e->owner != owner || e->dev != dev) continue;
    int overlaps = mpn_ipc_ranges_overlap(e->owner_base, e->size, desc->base, desc->size);
    if (!overlaps && memcmp(&e->handle, &desc->handle, sizeof(desc->handle)) != 0) continue;
    close_mapping(e->mapping, "stale");
    i = -1; /* the array was compacted: scan again */
  }
}

/* Whether an entry that uses mapping is handed out (copies not yet issued)
 * or pinned by a graph: closing it would pull it from under them. */
static int mapping_pinned(void* mapping) {
  for (int i = 0; i < imported.n; i++) {
    const ipc_entry_t* b = &imported.entries[i];
    if (b->mapping == mapping && (b->pending || b->pinned || b->graph_pins)) return 1;
  }
  return 0;
}

/* Whether a copy may still use mapping: as above, or copies issued with it
 * still run. */
static int mapping_in_use(void* mapping) {
  if (mapping_pinned(mapping)) return 1;
  for (int i = 0; i < imported.n; i++)
    if (imported.entries[i].mapping == mapping && events_busy(&imported.entries[i])) return 1;
  return 0;
}

void mpn_ipc_drop_in_way(uint64_t owner, uint64_t base, uint64_t size) {
  pthread_mutex_lock(&ipc_lock);
  reap_pins();
  for (int i = 0; i < imported.n; i++) {
    ipc_entry_t* e = &imported.entries[i];
    const mpn_ipc_closing_t* o = &e->opened_as; /* (the open, as listed) */
    /* (an exact one serves the new allocation; a mapping handed out for
     * copies not yet issued, or in a graph, stays: the owner asks again) */
    if (e->owner != owner || !e->opened || !mpn_ipc_ranges_overlap(o->base, o->size, base, size) ||
        (o->base == base && o->size == size) || mapping_pinned(e->mapping))
      continue;
    close_mapping(e->mapping, "in the way");
    i = -1; /* the array was compacted: scan again */
  }
  pthread_mutex_unlock(&ipc_lock);
}

/*
 * The last resort when the driver still finds the block mapped: the driver
 * recycled a freed allocation's memory at another address.  Closes every
 * import of owner that no issued copy still uses (their events completed)
 * and no graph holds; live ones among them are simply imported again later.
 */
static void flush_idle(uint64_t owner, int dev) {
  for (int i = 0; i < imported.n; i++) {
    ipc_entry_t* e = &imported.entries[i];
    /* (a borrower of the same mapping may be in use) */
    if (e->owner != owner || e->dev != dev || !e->opened || mapping_in_use(e->mapping)) continue;
    close_mapping(e->mapping, "idle");
    i = -1;
  }
}

/*
 * When the driver finds desc's memory mapped already, an import may show it:
 * one of a freed allocation whose memory the new one reuses (the owner
 * allocated desc over it), or one whose handle came back for a smaller
 * allocation while its mapping kept the first one's range.  The driver maps
 * an import's opened allocation, not the rest of its block
 * (bench/ipc_close.cu, section 7): where that range holds the whole new
 * allocation at the same distance as in the owner's space, the mapping
 * shows the new allocation's memory, and fresh borrows it.  exact: only a
 * mapping of exactly the new allocation's range, and not a forgotten one (it
 * may be of an earlier block at the same addresses); borrowed from before
 * anything is closed, it costs no wait and leaves nothing mapped beyond the
 * new allocation to stand in the way of its neighbours.
 */
static int borrow_mapping(uint64_t owner, int dev, const mpn_ipc_desc_t* desc, int exact, ipc_entry_t* fresh) {
  const mpn_driver_t* drv;
  if (mpn_driver_get(&drv) != ncclSuccess) return 0;
  for (int i = 0; i < imported.n; i++) {
    ipc_entry_t* e = &imported.entries[i];
    if (e->owner != owner || e->dev != dev || (exact && e->forget)) continue;
    CUdeviceptr rbase = 0;
    size_t rsize = 0;
    if (drv->mem_get_address_range(&rbase, &rsize, (CUdeviceptr)e->base) != CUDA_SUCCESS) continue;
    CUdeviceptr here = (CUdeviceptr)((char*)e->base + (int64_t)(desc->base - e->owner_base));
    if (here < rbase || here + desc->size > rbase + rsize || (exact && (here != rbase || desc->size != rsize)))
      continue;
    fresh->mapping = e->mapping;
    fresh->base = (void*)here;
    fresh->opened = 0;
    MPN_TRACE(MPN_SUBSYS_IPC, "buffer %llu lies inside the mapping of buffer %llu at %p: borrowed",
              (unsigned long long)desc->buffer_id, (unsigned long long)e->buffer_id, e->mapping);
    return 1;
  }
  return 0;
}

/* Logs what the cache holds of owner when the driver refuses an open, so
 * that the block it finds mapped can be told apart. */
static void dump_owner(uint64_t owner, int dev, const mpn_ipc_desc_t* desc) {
  const unsigned char* h = (const unsigned char*)&desc->handle;
  MPN_WARN("CUDA IPC: buffer %llu [%llx, +%llu) of process %llx (handle %02x%02x%02x%02x%02x%02x%02x%02x..."
           ") is mapped already, by none of these imports:",
           (unsigned long long)desc->buffer_id, (unsigned long long)desc->base,
           (unsigned long long)desc->size, (unsigned long long)owner, h[0], h[1], h[2], h[3], h[4],
           h[5], h[6], h[7]);
  for (int i = 0; i < imported.n; i++) {
    const ipc_entry_t* e = &imported.entries[i];
    if (e->owner != owner || e->dev != dev) continue;
    const unsigned char* x = (const unsigned char*)&e->handle;
    int busy = events_busy(e);
    MPN_WARN("  buffer %llu [%llx, +%llu) at %p%s%s%s%s handle %02x%02x%02x%02x%02x%02x%02x%02x...",
             (unsigned long long)e->buffer_id, (unsigned long long)e->owner_base, (unsigned long long)e->size, e->base,
             e->opened ? "" : " borrowed", e->pending ? " pending" : "", e->pinned || e->graph_pins ? " pinned" : "",
             busy ? " busy" : "", x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]);
  }
}

/* An open, traced before the driver's call. */
static cudaError_t ipc_open(uint64_t owner, int dev, const mpn_ipc_desc_t* desc, void** mapping) {
  MPN_TRACE(MPN_SUBSYS_IPC, "opening buffer %llu of process %llx (device %d here)",
            (unsigned long long)desc->buffer_id, (unsigned long long)owner, dev);
  return cudaIpcOpenMemHandle(mapping, desc->handle, cudaIpcMemLazyEnablePeerAccess);
}

/* Why open_import stopped before the driver's last answer (its *stop). */
enum {
  OPEN_ON,     /* it did not: the driver's answer stands */
  OPEN_LATE,   /* a close in the way did not end within MPINCCL_IPC_CLOSE_WAIT */
  OPEN_FOUND,  /* another thread imported the buffer while this one waited: nothing opened */
  OPEN_NO_ROOM /* after the wait, the cache could not grow: nothing opened */
};

/*
 * After the driver refused desc as mapped already and no import lends it:
 * the imports in its way are handed to the closing thread, whose closes are
 * then waited for, at most MPINCCL_IPC_CLOSE_WAIT seconds (they wait for
 * this process's GPU work), and the open retried.  which: 0 for the
 * imports of freed allocations that overlapped desc or had its handle,
 * 1 (last resort) for every idle import of owner.  The wait is made without
 * ipc_lock (the closing thread never takes it), so that the process's other
 * threads import, report and launch meanwhile; the cache may change under
 * it, so what was found in it before is found again: the buffer itself
 * (another thread may have imported it), and room for its entry (the room
 * made before the first open may be taken), made before the open so that a
 * mapping opened always gets its entry.  *stop: OPEN_*.
 */
static cudaError_t reopen_after_closes(uint64_t owner, int dev, const mpn_ipc_desc_t* desc, int which,
                                       ipc_entry_t* fresh, int* stop) {
  if (which == 0)
    drop_stale(owner, dev, desc);
  else
    flush_idle(owner, dev);
  int64_t wait_ms = mpn_param_int(MPN_PARAM_IPC_CLOSE_WAIT) * 1000;
  pthread_mutex_unlock(&ipc_lock);
  int clear = which == 0 ? mpn_ipc_closer_wait(owner, dev, desc->base, desc->size, &desc->handle, wait_ms)
                         : mpn_ipc_closer_wait(owner, dev, 0, UINT64_MAX, NULL, wait_ms);
  pthread_mutex_lock(&ipc_lock);
  if (cache_find(&imported, owner, desc->buffer_id, dev) != NULL)
    *stop = OPEN_FOUND;
  else if (!clear)
    *stop = OPEN_LATE;
  else if (!cache_reserve(&imported))
    *stop = OPEN_NO_ROOM;
  if (*stop != OPEN_ON) return cudaErrorAlreadyMapped;
  return ipc_open(owner, dev, desc, &fresh->mapping);
}

/* Opens desc for the cache entry fresh, working around the driver's refusal
 * to map memory twice (see mpn_ipc_import in ipc.h).  Under ipc_lock, which
 * a wait for closes lets go of meanwhile (reopen_after_closes).  *stop:
 * OPEN_*; with OPEN_FOUND and OPEN_NO_ROOM nothing was opened. */
static cudaError_t open_import(uint64_t owner, int dev, const mpn_ipc_desc_t* desc, ipc_entry_t* fresh, int* stop) {
  cudaError_t err = ipc_open(owner, dev, desc, &fresh->mapping);
  if (err == cudaErrorAlreadyMapped && borrow_mapping(owner, dev, desc, 1, fresh)) {
    cudaGetLastError();
    return cudaSuccess;
  }
  for (int which = 0; err == cudaErrorAlreadyMapped && which < 2 && *stop == OPEN_ON; which++) {
    cudaGetLastError();
    err = reopen_after_closes(owner, dev, desc, which, fresh, stop);
  }
  if (*stop == OPEN_FOUND || *stop == OPEN_NO_ROOM) return err;
  /* Last, a mapping that no close could remove (its copies not yet issued
   * or still running) and that holds the buffer. */
  if (err == cudaErrorAlreadyMapped && *stop == OPEN_ON && borrow_mapping(owner, dev, desc, 0, fresh)) {
    cudaGetLastError();
    return cudaSuccess;
  }
  if (err == cudaSuccess) {
    fresh->base = fresh->mapping;
    fresh->opened_as = (mpn_ipc_closing_t){.mapping = fresh->mapping,
                                           .dev = dev,
                                           .owner = owner,
                                           .base = desc->base,
                                           .size = desc->size,
                                           .handle = desc->handle};
    mpn_ipc_held_add(&fresh->opened_as); /* owners read it (ipc_held.h) */
    for (int i = 0; i < imported.n; i++)
      if (imported.entries[i].mapping == fresh->mapping)
        MPN_TRACE(MPN_SUBSYS_IPC, "buffer %llu came back as the mapping of buffer %llu",
                  (unsigned long long)desc->buffer_id, (unsigned long long)imported.entries[i].buffer_id);
  } else if (err == cudaErrorAlreadyMapped) {
    if (*stop == OPEN_ON) cudaGetLastError(); /* (else the answer is ours, the driver's cleared before the wait) */
    dump_owner(owner, dev, desc);
  }
  return err;
}

static void sweep_forgotten(void);

/* Copies issued with from may still run on the mapping that into keeps: its
 * events are into's too.  0 (into unchanged) when they do not fit. */
static int events_merge(ipc_entry_t* into, const ipc_entry_t* from) {
  cudaEvent_t merged[MPN_IPC_USED_EVENTS];
  memcpy(merged, into->used, sizeof(merged));
  for (int k = 0; k < MPN_IPC_USED_EVENTS; k++) {
    if (from->used[k] == NULL) continue;
    int at = -1;
    for (int j = 0; j < MPN_IPC_USED_EVENTS && at < 0; j++)
      if (merged[j] == from->used[k]) at = j;
    for (int j = 0; j < MPN_IPC_USED_EVENTS && at < 0; j++)
      if (merged[j] == NULL) at = j;
    if (at < 0) return 0;
    merged[at] = from->used[k];
  }
  memcpy(into->used, merged, sizeof(merged));
  return 1;
}

/*
 * After fresh was opened: the imports of the owner's allocations that
 * overlapped it in the owner's address space are of freed allocations and
 * never used again (a new allocation has a new buffer id).  One that came
 * back as fresh's own mapping (the driver recycled its handle, counting the
 * opens) goes now, handing its open to fresh or closing it; the others are
 * forgotten (closed, with the entries borrowing their mapping, once idle).
 * Before, they stayed until the driver refused an open, so a peer that
 * allocates a new buffer for each message grew the cache for good.
 */
static void retire_overlapped(ipc_entry_t* fresh) {
  for (int i = 0; i < imported.n;) {
    ipc_entry_t* e = &imported.entries[i];
    if (e->owner != fresh->owner || e->dev != fresh->dev || e->buffer_id == fresh->buffer_id ||
        !mpn_ipc_ranges_overlap(e->owner_base, e->size, fresh->owner_base, fresh->size)) {
      i++;
      continue;
    }
    if (e->mapping != fresh->mapping) {
      for (int j = 0; j < imported.n; j++)
        if (imported.entries[j].mapping == e->mapping) imported.entries[j].forget = imported.entries[j].stale = 1;
      i++;
      continue;
    }
    /* Handed out or in a graph, or more streams than fresh can tell apart:
     * left as it was (closed with fresh's mapping, if ever). */
    if (e->pending || e->pinned || e->graph_pins || !events_merge(fresh, e)) {
      i++;
      continue;
    }
    if (e->opened && !fresh->opened) {
      fresh->opened = 1; /* the mapping's open is fresh's now */
      fresh->opened_as = e->opened_as;
    } else if (e->opened) {
      close_later(e, "stale");
    }
    MPN_TRACE(MPN_SUBSYS_IPC, "buffer %llu replaces the stale import of buffer %llu at %p",
              (unsigned long long)fresh->buffer_id, (unsigned long long)e->buffer_id, e->mapping);
    *e = imported.entries[--imported.n];
  }
}

/* The error of an import that opened nothing: err, the driver's last
 * answer; stop, why the open stopped (OPEN_*). */
static ncclResult_t import_failed(uint64_t owner, const mpn_ipc_desc_t* desc, cudaError_t err, int stop) {
  if (stop == OPEN_NO_ROOM) return mpn_error_set(NULL, ncclSystemError, "out of memory");
  if (stop == OPEN_LATE)
    return mpn_error_set(NULL, ncclUnhandledCudaError,
                         "buffer %llu of process %llx lies in memory that this process still maps through an "
                         "import of a freed buffer of that process, and closing that import waits for this "
                         "process's GPU work, which did not end within MPINCCL_IPC_CLOSE_WAIT (%lld s): its "
                         "streams may wait for peers that wait for this process (docs/P2P.md, known problem 17)",
                         (unsigned long long)desc->buffer_id, (unsigned long long)owner,
                         (long long)mpn_param_int(MPN_PARAM_IPC_CLOSE_WAIT));
  cudaGetLastError();
  return mpn_error_set(NULL, ncclUnhandledCudaError, "cudaIpcOpenMemHandle failed for buffer %llu of process %llx: %s",
                       (unsigned long long)desc->buffer_id, (unsigned long long)owner, cudaGetErrorString(err));
}

ncclResult_t mpn_ipc_import(uint64_t owner, const mpn_ipc_desc_t* desc, void** ptr,
                            mpn_ipc_ref_t* ref) {
  ncclResult_t res = ncclSuccess;
  int dev = -1;
  MPN_CUDA_CHECK(cudaGetDevice(&dev));
  pthread_mutex_lock(&ipc_lock);
  sweep_forgotten();
  ipc_entry_t* e = cache_find(&imported, owner, desc->buffer_id, dev);
  if (e == NULL && !cache_reserve(&imported)) {
    /* (Before the open: a mapping opened and then not added would stay
     * mapped with nothing here knowing of it.) */
    res = mpn_error_set(NULL, ncclSystemError, "out of memory");
  } else if (e == NULL) {
    ipc_entry_t fresh = {.owner = owner, .buffer_id = desc->buffer_id, .dev = dev,
                         .handle = desc->handle, .owner_base = desc->base, .size = desc->size,
                         .opened = 1};
    /* The caller's stream may be capturing a graph: the driver calls made
     * here (opening, closing, event queries) are not part of it.  (The mode
     * is this thread's own: it stays relaxed through a wait for closes
     * without the lock, which calls no CUDA.) */
    mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
    int stop = OPEN_ON;
    cudaError_t err = open_import(owner, dev, desc, &fresh, &stop);
    if (err == cudaSuccess) retire_overlapped(&fresh);
    mpn_cuda_relaxed_leave(mode);
    if (stop == OPEN_FOUND) {
      e = cache_find(&imported, owner, desc->buffer_id, dev); /* (found under the lock held since) */
    } else if (err != cudaSuccess) {
      res = import_failed(owner, desc, err, stop);
    } else {
      e = cache_add(&imported, &fresh); /* (room made under the lock held since: cannot fail) */
      MPN_TRACE(MPN_SUBSYS_IPC, "imported buffer %llu of process %llx at %p%s",
                (unsigned long long)desc->buffer_id, (unsigned long long)owner, fresh.base,
                fresh.opened ? "" : " (inside a block mapped before)");
    }
  }
  if (res == ncclSuccess) {
    *ptr = (char*)e->base + desc->offset;
    e->pending++;
    *ref = (mpn_ipc_ref_t){owner, desc->buffer_id, dev};
  }
  pthread_mutex_unlock(&ipc_lock);
  return res;
}

/*
 * Adds used to the events that tell when e's copies are done: one per
 * stream, as each event stands for the last copies of its own stream only.
 * Events whose copies are done make room.  0 when used is NULL or no room
 * is left (the import is then never known idle: pinned).
 */
static int note_used(ipc_entry_t* e, cudaEvent_t used) {
  if (used == NULL) return 0;
  for (int k = 0; k < MPN_IPC_USED_EVENTS; k++)
    if (e->used[k] == used) return 1;
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter(); /* (as for the sweep's queries) */
  int room = -1;
  for (int k = 0; k < MPN_IPC_USED_EVENTS; k++) {
    if (e->used[k] != NULL) {
      cudaError_t err = cudaEventQuery(e->used[k]);
      if (err != cudaSuccess) {
        mpn_cuda_forget(err);
        continue;
      }
      e->used[k] = NULL; /* that stream's copies are done */
    }
    if (room < 0) room = k;
  }
  mpn_cuda_relaxed_leave(mode);
  if (room < 0) return 0;
  e->used[room] = used;
  return 1;
}

void mpn_ipc_mark_used(const mpn_ipc_ref_t* ref, cudaEvent_t used, int forever) {
  pthread_mutex_lock(&ipc_lock);
  ipc_entry_t* e = cache_find(&imported, ref->owner, ref->buffer_id, ref->dev);
  if (e != NULL) {
    if (e->pending > 0) e->pending--;
    if (forever || !note_used(e, used)) e->pinned = 1;
    e->forget = e->stale; /* used again: imported again, in effect (not a freed allocation's) */
  }
  sweep_forgotten();
  pthread_mutex_unlock(&ipc_lock);
}

/* The entry numbered serial, or NULL (closed, or its device was reset). */
static ipc_entry_t* entry_of_serial(uint64_t serial) {
  for (int i = 0; i < imported.n; i++)
    if (imported.entries[i].serial == serial) return &imported.entries[i];
  return NULL;
}

/* Takes in the news of pins (under ipc_lock): a graph gone lets go of its
 * import; one whose record could not be hung keeps it open for good. */
static void reap_pins(void) {
  for (mpn_ipc_pin_t** at = &pins; *at;) {
    mpn_ipc_pin_t* p = *at;
    int news = __atomic_load_n(&p->news, __ATOMIC_ACQUIRE);
    if (news == PIN_HELD) {
      at = &p->next;
      continue;
    }
    ipc_entry_t* e = entry_of_serial(p->serial);
    if (e != NULL && e->graph_pins > 0) e->graph_pins--;
    if (e != NULL && news == PIN_KEPT) e->pinned = 1;
    *at = p->next;
    free(p);
  }
}

mpn_ipc_pin_t* mpn_ipc_mark_captured(const mpn_ipc_ref_t* ref) {
  mpn_ipc_pin_t* pin = NULL;
  pthread_mutex_lock(&ipc_lock);
  ipc_entry_t* e = cache_find(&imported, ref->owner, ref->buffer_id, ref->dev);
  if (e != NULL) {
    if (e->pending > 0) e->pending--;
    e->forget = e->stale; /* used again: imported again, in effect (not a freed allocation's) */
    pin = malloc(sizeof(*pin));
    if (pin != NULL) {
      *pin = (mpn_ipc_pin_t){.serial = e->serial, .news = PIN_HELD, .next = pins};
      pins = pin;
      e->graph_pins++;
    } else {
      e->pinned = 1; /* no news could tell when the graph is gone */
    }
  }
  sweep_forgotten();
  pthread_mutex_unlock(&ipc_lock);
  return pin;
}

void mpn_ipc_pin_gone(void* pin, uint32_t slot, uint64_t seq, int side) {
  (void)slot, (void)side;
  __atomic_store_n(&((mpn_ipc_pin_t*)pin)->news, seq != 0 ? PIN_GONE : PIN_KEPT, __ATOMIC_RELEASE);
}

int mpn_ipc_held_open(void) {
  int n = 0;
  pthread_mutex_lock(&ipc_lock);
  reap_pins();
  for (int i = 0; i < imported.n; i++) n += imported.entries[i].graph_pins > 0 || imported.entries[i].pinned;
  pthread_mutex_unlock(&ipc_lock);
  return n;
}

void mpn_ipc_release(const mpn_ipc_ref_t* ref) {
  pthread_mutex_lock(&ipc_lock);
  ipc_entry_t* e = cache_find(&imported, ref->owner, ref->buffer_id, ref->dev);
  if (e != NULL) close_mapping(e->mapping, "released");
  pthread_mutex_unlock(&ipc_lock);
}

/* Whether the import mapping is closable now: every entry that uses it
 * forgotten, nothing pinned or pending on it, and every copy issued with it
 * complete. */
static int mapping_closable(void* mapping) {
  for (int i = 0; i < imported.n; i++)
    if (imported.entries[i].mapping == mapping && !imported.entries[i].forget) return 0;
  return !mapping_in_use(mapping);
}

/* Hands the forgotten imports that became idle to the closing thread
 * (under ipc_lock).  The caller's stream may be capturing a graph: the
 * event queries are not part of it (relaxed mode, as for opening). */
static void sweep_forgotten(void) {
  reap_pins();
  int any = 0;
  for (int i = 0; i < imported.n && !any; i++) any = imported.entries[i].forget;
  if (!any) return;
  mpn_capture_mode_t mode = mpn_cuda_relaxed_enter();
  for (int i = 0; i < imported.n; i++) {
    ipc_entry_t* e = &imported.entries[i];
    if (!e->forget || !mapping_closable(e->mapping)) continue;
    close_mapping(e->mapping, "forgotten");
    i = -1; /* the array was compacted: scan again */
  }
  mpn_cuda_relaxed_leave(mode);
}

/* Whether another buffer imported into e's mapping is still wanted. */
static int mapping_kept(const ipc_entry_t* e, mpn_ipc_kept_fn kept) {
  for (int i = 0; kept != NULL && i < imported.n; i++) {
    const ipc_entry_t* o = &imported.entries[i];
    if (o != e && o->mapping == e->mapping && !o->forget && kept(o->owner, o->buffer_id, o->dev)) return 1;
  }
  return 0;
}

void mpn_ipc_forget(uint64_t owner, uint64_t buffer_id, int dev, mpn_ipc_kept_fn kept) {
  pthread_mutex_lock(&ipc_lock);
  ipc_entry_t* e = cache_find(&imported, owner, buffer_id, dev);
  if (e != NULL && !mapping_kept(e, kept)) {
    /* Never waits: a busy mapping is closed by a later import or report. */
    void* mapping = e->mapping;
    for (int i = 0; i < imported.n; i++)
      if (imported.entries[i].mapping == mapping) imported.entries[i].forget = 1;
    sweep_forgotten();
  }
  pthread_mutex_unlock(&ipc_lock);
}

void mpn_ipc_forget_device(int dev) {
  pthread_mutex_lock(&ipc_lock);
  exported.n = 0;
  for (int i = 0; i < imported.n;)
    if (imported.entries[i].dev == dev)
      imported.entries[i] = imported.entries[--imported.n];
    else
      i++;
  pthread_mutex_unlock(&ipc_lock);
  mpn_ipc_closer_forget(dev);
  mpn_ipc_held_forget(dev);
}

int mpn_ipc_import_live(uint64_t owner, uint64_t buffer_id, int dev) {
  pthread_mutex_lock(&ipc_lock);
  const ipc_entry_t* e = cache_find(&imported, owner, buffer_id, dev);
  int live = e != NULL && !e->forget;
  pthread_mutex_unlock(&ipc_lock);
  return live;
}

void mpn_ipc_counts(int* n_exported, int* n_imported) {
  pthread_mutex_lock(&ipc_lock);
  *n_exported = exported.n;
  *n_imported = imported.n;
  pthread_mutex_unlock(&ipc_lock);
}
