/*
 * test_pair_setup.c - pair set-up (src/p2p/pair.c) on the host: the CUDA
 * calls of a mapping are replaced at link time (--wrap) and the flags are
 * in host memory, so the test can play the peer process that created a
 * pair file and has not finished setting it up.
 */
#define _GNU_SOURCE /* O_TMPFILE */
#include <check.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/param.h"
#include "core/proc.h"
#include "cuda/ipc.h"
#include "p2p/pair.h"
#include "run_suite.h"

/* Registrations and unregistrations of host memory, counted; while
 * device_pointer_fails is set, the registered memory has no device address. */
static int registers, unregisters, device_pointer_fails; /* atomic */
cudaError_t __wrap_cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  (void)ptr, (void)size, (void)flags;
  __atomic_add_fetch(&registers, 1, __ATOMIC_ACQ_REL);
  return cudaSuccess;
}
cudaError_t __wrap_cudaHostGetDevicePointer(void** dev, void* host, unsigned int flags) {
  (void)flags;
  if (__atomic_load_n(&device_pointer_fails, __ATOMIC_ACQUIRE)) return cudaErrorInvalidValue;
  *dev = host;
  return cudaSuccess;
}
/* While set, cudaHostUnregister waits (at most 5 s) until it is cleared:
 * an unmap whose CUDA calls wait for the device. */
static int unregister_held;   /* atomic */
static int unregister_inside; /* atomic: a call waits */

cudaError_t __wrap_cudaHostUnregister(void* ptr) {
  (void)ptr;
  __atomic_add_fetch(&unregisters, 1, __ATOMIC_ACQ_REL);
  if (!__atomic_load_n(&unregister_held, __ATOMIC_ACQUIRE)) return cudaSuccess;
  __atomic_store_n(&unregister_inside, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 5000 && __atomic_load_n(&unregister_held, __ATOMIC_ACQUIRE); i++) usleep(1000);
  __atomic_store_n(&unregister_inside, 0, __ATOMIC_RELEASE);
  return cudaSuccess;
}
cudaError_t __wrap_cudaGetLastError(void) { return cudaSuccess; }
/* Set in a child that plays a creator killed while it makes its pair file:
 * ftruncate, which sizes the file before the stamp, kills it. */
static int die_in_ftruncate;
int __real_ftruncate(int fd, off_t length);
int __wrap_ftruncate(int fd, off_t length) {
  if (die_in_ftruncate) raise(SIGKILL);
  return __real_ftruncate(fd, length);
}
/* While set, open refuses O_TMPFILE, as a file system without it does,
 * and counts the refusals. */
static int no_tmpfile, tmpfile_refused;
int __real_open(const char* path, int flags, ...);
int __wrap_open(const char* path, int flags, ...) {
  mode_t mode = 0;
  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  if (no_tmpfile && (flags & O_TMPFILE) == O_TMPFILE) {
    tmpfile_refused++;
    errno = EOPNOTSUPP;
    return -1;
  }
  return __real_open(path, flags, mode);
}
cudaError_t __wrap_cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode* mode) {
  (void)mode;
  return cudaErrorNotSupported; /* nothing to give back */
}
/* Device flags (MPINCCL_FLAGS=device, kept_block_after_reset): a block at
 * a made-up address, exported without a device (host_pairs.h); cudaFree
 * notes what it is given. */
#define HOST_PAIRS_BLOCK
#include "host_pairs.h"
static void* freed_block;
cudaError_t __wrap_cudaGetDevice(int* dev) {
  *dev = 0;
  return cudaSuccess;
}
cudaError_t __wrap_cudaFree(void* ptr) {
  freed_block = ptr;
  return cudaSuccess;
}

static uint64_t test_key(int n) { return ((uint64_t)getpid() << 20) ^ ((uint64_t)time(NULL) << 4) ^ (uint64_t)n; }

static void pair_name(char* name, size_t size, uint64_t key) {
  snprintf(name, size, "/mpinccl-%016llx-%d-%d", (unsigned long long)key, 0, 1);
}

/* The peer process's side: the file made and sized, its flags not decided. */
static mpn_pair_mem_t* peer_create(uint64_t key) {
  char name[96];
  pair_name(name, sizeof(name), key);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, sizeof(mpn_pair_mem_t)), 0);
  void* mem = mmap(NULL, sizeof(mpn_pair_mem_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ck_assert_ptr_ne(mem, MAP_FAILED);
  return mem;
}

static int name_exists(uint64_t key) {
  char name[96];
  pair_name(name, sizeof(name), key);
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

/* One mpn_pair_map on a thread of its own. */
typedef struct {
  pthread_t thread;
  uint64_t key;
  mpn_pair_t* pair;
  volatile int* abort; /* the communicator's abort flag, or NULL */
  ncclResult_t res;
  int done;        /* atomic */
  uint64_t end_ns; /* when it returned */
  char why[256];   /* its thread's ncclGetLastError text */
} mapper_t;

static void* mapper_main(void* arg) {
  mapper_t* m = arg;
  m->res = mpn_pair_map(m->key, 0, 1, m->abort, &m->pair);
  m->end_ns = mpn_clock_now_ns();
  snprintf(m->why, sizeof(m->why), "%s", mpn_error_last(NULL));
  __atomic_store_n(&m->done, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void mapper_start(mapper_t* m, uint64_t key, volatile int* abort) {
  *m = (mapper_t){.key = key, .abort = abort, .res = ncclInternalError};
  ck_assert_int_eq(pthread_create(&m->thread, NULL, mapper_main, m), 0);
}

static int unmaps; /* atomic */

static void* unmapper_main(void* arg) {
  ck_assert_int_eq(((mpn_pair_t*)arg)->created, 1);
  ck_assert_uint_eq(((mpn_pair_t*)arg)->mem->flags_where, MPN_FLAGS_HOST);
  mpn_pair_unmap(arg, 0);
  __atomic_add_fetch(&unmaps, 1, __ATOMIC_RELEASE);
  return NULL;
}

static int mapper_wait(mapper_t* m, double seconds) {
  for (int i = 0; i < (int)(seconds * 1000) && !__atomic_load_n(&m->done, __ATOMIC_ACQUIRE); i++) usleep(1000);
  return __atomic_load_n(&m->done, __ATOMIC_ACQUIRE);
}

/* A thread waiting for a peer's set-up of one pair (up to
 * MPINCCL_BOOTSTRAP_TIMEOUT) holds up neither the set-up of another pair
 * nor an unmap; a second thread mapping the same pair waits for the first
 * and gets the same mapping. */
START_TEST(wait_holds_up_no_other_pair) {
  uint64_t kx = test_key(1), ky = test_key(2);
  mpn_pair_mem_t* peer = peer_create(kx);
  mapper_t a, same, other;
  mapper_start(&a, kx, NULL);
  usleep(200 * 1000); /* a now waits for the peer's decision */
  ck_assert(!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE));
  mapper_start(&same, kx, NULL);
  mapper_start(&other, ky, NULL); /* a pair of another communicator, nobody's yet */
  /* (Not a bound on time: waiting for the other pair's set-up, it would
   * return only at the bootstrap timeout, 20 s, with ncclTimeout; 25 s
   * stays within the case's 30.) */
  int in_time = mapper_wait(&other, 25.0);
  pthread_t unmapper;
  int unmapped = 0;
  if (in_time) { /* and its unmap (a communicator destroyed) meanwhile */
    ck_assert_int_eq(pthread_create(&unmapper, NULL, unmapper_main, other.pair), 0);
    for (int i = 0; i < 25000 && !__atomic_load_n(&unmaps, __ATOMIC_ACQUIRE); i++) usleep(1000);
    unmapped = __atomic_load_n(&unmaps, __ATOMIC_ACQUIRE);
  }
  uint64_t published = mpn_clock_now_ns();
  __atomic_store_n(&peer->flags_where, MPN_FLAGS_HOST, __ATOMIC_RELEASE);
  pthread_join(other.thread, NULL);
  if (in_time) pthread_join(unmapper, NULL);
  ck_assert_msg(in_time,
                "mapping an unrelated pair returned %.2f s after the peer of another pair published "
                "(it waited for that pair's set-up, 25 s and more)",
                (double)(other.end_ns - published) / 1e9);
  ck_assert_int_eq(other.res, ncclSuccess);
  ck_assert_msg(unmapped, "unmapping an unrelated pair waited for another pair's set-up");
  ck_assert(!name_exists(ky)); /* made here, never opened by a peer: gone at the unmap */
  pthread_join(a.thread, NULL);
  pthread_join(same.thread, NULL);
  ck_assert_int_eq(a.res, ncclSuccess);
  ck_assert_int_eq(same.res, ncclSuccess);
  ck_assert_ptr_eq(same.pair, a.pair); /* one mapping, two references */
  ck_assert(same.end_ns >= published);
  ck_assert_int_eq(a.pair->created, 0);
  ck_assert_uint_eq(__atomic_load_n(&peer->name_gone, __ATOMIC_ACQUIRE), 1); /* seen by the peer */
  ck_assert(!name_exists(kx));
  mpn_pair_unmap(a.pair, 0);
  ck_assert_uint_eq(__atomic_load_n(&peer->name_gone, __ATOMIC_ACQUIRE), 1);
  mpn_pair_unmap(same.pair, 0);
  munmap(peer, sizeof(*peer));
}
END_TEST

/* A set-up that fails ends the wait of a second thread for the same pair,
 * which then tries on its own and learns the same. */
START_TEST(failed_setup_ends_waiters) {
  uint64_t k = test_key(4);
  mpn_pair_mem_t* peer = peer_create(k);
  mapper_t a, same;
  mapper_start(&a, k, NULL);
  usleep(100 * 1000);
  mapper_start(&same, k, NULL);
  usleep(100 * 1000);
  ck_assert(!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE) && !__atomic_load_n(&same.done, __ATOMIC_ACQUIRE));
  __atomic_store_n(&peer->flags_where, MPN_FLAGS_FAILED, __ATOMIC_RELEASE);
  ck_assert(mapper_wait(&a, 5.0) && mapper_wait(&same, 5.0));
  pthread_join(a.thread, NULL);
  pthread_join(same.thread, NULL);
  ck_assert_int_eq(a.res, ncclRemoteError);
  ck_assert_int_eq(same.res, ncclRemoteError);
  char name[96];
  pair_name(name, sizeof(name), k);
  shm_unlink(name); /* (the peer's, which failed) */
  munmap(peer, sizeof(*peer));
}
END_TEST

/* The side that opens the creator's file and cannot map its device flags
 * (an import the driver refuses: here a handle of nothing) tells the
 * creator through the file, as an abort would: an error with the reason,
 * and the aborted mark its watchdog acts on (its streams may wait for
 * this side's flags).  Before, the creator learned nothing and waited. */
START_TEST(failed_adopt_tells_creator) {
  uint64_t k = test_key(7);
  mpn_pair_mem_t* peer = peer_create(k);
  peer->flags_owner = 1; /* (another process's device memory; its handle names nothing) */
  memset(&peer->flags_desc, 0, sizeof(peer->flags_desc));
  __atomic_store_n(&peer->flags_where, MPN_FLAGS_DEVICE, __ATOMIC_RELEASE);
  mapper_t a;
  mapper_start(&a, k, NULL);
  ck_assert(mapper_wait(&a, 5.0));
  pthread_join(a.thread, NULL);
  ck_assert_int_ne(a.res, ncclSuccess);
  ck_assert_uint_eq(__atomic_load_n(&peer->aborted, __ATOMIC_ACQUIRE), 1);
  for (int side = 0; side < 2; side++) { /* (the opener does not know which side the creator is) */
    ck_assert_uint_ge(__atomic_load_n(&peer->error[side].count, __ATOMIC_ACQUIRE), 1);
    ck_assert_msg(strstr(peer->error[side].text, "could not set up") != NULL, "%s", peer->error[side].text);
  }
  char name[96];
  pair_name(name, sizeof(name), k);
  shm_unlink(name); /* (the peer's) */
  munmap(peer, sizeof(*peer));
}
END_TEST

/* A pair file registered with CUDA whose device address cannot be had
 * fails the set-up, and the registration is undone: left, CUDA kept the
 * pages pinned after the file was unmapped. */
START_TEST(failed_device_pointer_unregisters) {
  uint64_t k = test_key(9);
  int before = __atomic_load_n(&unregisters, __ATOMIC_ACQUIRE);
  int registered = __atomic_load_n(&registers, __ATOMIC_ACQUIRE);
  __atomic_store_n(&device_pointer_fails, 1, __ATOMIC_RELEASE);
  mpn_pair_t* pair = NULL;
  ncclResult_t res = mpn_pair_map(k, 0, 1, NULL, &pair);
  __atomic_store_n(&device_pointer_fails, 0, __ATOMIC_RELEASE);
  ck_assert_int_eq(res, ncclUnhandledCudaError);
  ck_assert_msg(strstr(mpn_error_last(NULL), "registering") != NULL, "%s", mpn_error_last(NULL));
  ck_assert_int_eq(__atomic_load_n(&registers, __ATOMIC_ACQUIRE) - registered, 1);
  ck_assert_int_eq(__atomic_load_n(&unregisters, __ATOMIC_ACQUIRE) - before, 1);
  ck_assert(!name_exists(k)); /* (abandoned) */
}
END_TEST

/* A creator that died after stamping its file and before deciding where
 * the flags live (killed, crashed) ends the peer's wait within a fraction
 * of a second, with ncclRemoteError naming it, not at the bootstrap
 * timeout (20 s here). */
START_TEST(dead_creator_ends_wait) {
  int go[2];
  ck_assert_int_eq(pipe(go), 0);
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) { /* the creator: lives until told, then is killed */
    char c;
    close(go[1]);
    if (read(go[0], &c, 1) < 0) _exit(1);
    _exit(0);
  }
  close(go[0]);
  uint64_t started = mpn_proc_start_time(child);
  uint64_t k = test_key(5);
  mpn_pair_mem_t* peer = peer_create(k);
  peer->creator = (mpn_pair_creator_t){.pidns = mpn_proc_pidns(), .start_time = started, .pid = child};
  __atomic_store_n(&peer->creator.magic, MPN_PAIR_MAGIC, __ATOMIC_RELEASE);
  mapper_t a;
  mapper_start(&a, k, NULL);
  usleep(200 * 1000); /* a waits for a live creator */
  ck_assert_msg(!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE), "the wait ended while its creator lived");
  uint64_t killed = mpn_clock_now_ns();
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  close(go[1]);
  /* The outcome tells, not the time it took (this machine may stop every
   * process for seconds at once): a wait that ran to the bootstrap
   * timeout (20 s) ends with ncclTimeout; 25 s stays within the case's 30. */
  ck_assert_msg(mapper_wait(&a, 25.0), "the peer still waited 25 s after its creator died");
  pthread_join(a.thread, NULL);
  ck_assert_msg(a.res == ncclRemoteError, "the peer's wait ended %.1f s after its creator died with %s: %s",
                (double)(a.end_ns - killed) / 1e9, ncclGetErrorString(a.res), a.why);
  ck_assert_ptr_nonnull(strstr(a.why, "ended before setting it up"));
  char name[96];
  pair_name(name, sizeof(name), k);
  shm_unlink(name);
  munmap(peer, sizeof(*peer));
}
END_TEST

/* An abort of the communicator ends the wait for a creator that lives but
 * has not set the pair up (stuck, or slow): ncclCommAbort waits for the
 * launch that waits here, and waited up to the bootstrap timeout (20 s
 * here), after which the wait ended with ncclTimeout. */
START_TEST(abort_ends_adopt_wait) {
  uint64_t k = test_key(7);
  mpn_pair_mem_t* peer = peer_create(k);
  peer->creator =
      (mpn_pair_creator_t){.pidns = mpn_proc_pidns(), .start_time = mpn_proc_start_time(getpid()), .pid = getpid()};
  __atomic_store_n(&peer->creator.magic, MPN_PAIR_MAGIC, __ATOMIC_RELEASE);
  static volatile int aborted;
  mapper_t a;
  mapper_start(&a, k, &aborted);
  usleep(200 * 1000); /* a waits for a live creator */
  ck_assert_msg(!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE), "the wait ended while its creator lived");
  aborted = 1;
  ck_assert_msg(mapper_wait(&a, 25.0), "the wait went on 25 s after the abort");
  pthread_join(a.thread, NULL);
  ck_assert_msg(a.res == ncclInvalidUsage && strstr(a.why, "aborted") != NULL, "the wait ended with %s: %s",
                ncclGetErrorString(a.res), a.why);
  char name[96];
  pair_name(name, sizeof(name), k);
  shm_unlink(name);
  munmap(peer, sizeof(*peer));
}
END_TEST

/* A creator killed while it made its file, before the stamp, left the
 * file under the pair's name unstamped: its peer waited for it until the
 * bootstrap timeout (20 s here) and failed with ncclTimeout, and no sweep
 * could judge the file, so it stayed in /dev/shm.  The file now has its
 * name only once it is stamped: the peer finds none and makes its own. */
START_TEST(creator_killed_before_stamp_leaves_nothing) {
  uint64_t k = test_key(8);
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    mpn_pair_t* pair = NULL;
    die_in_ftruncate = 1;
    mpn_pair_map(k, 0, 1, NULL, &pair);
    _exit(1); /* (not reached) */
  }
  int status = 0;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  int left = name_exists(k);
  mpn_pair_t* pair = NULL;
  ncclResult_t res = mpn_pair_map(k, 0, 1, NULL, &pair);
  char why[256], name[96];
  snprintf(why, sizeof(why), "%s", res == ncclSuccess ? "" : mpn_error_last(NULL));
  pair_name(name, sizeof(name), k);
  if (res != ncclSuccess) shm_unlink(name);
  ck_assert_msg(!left && res == ncclSuccess,
                "the killed creator left its file under the pair's name: %d; the peer's mapping "
                "returned %d (%s)",
                left, res, why);
  ck_assert_int_eq(pair->created, 1);
  ck_assert(name_exists(k)); /* linked, stamped */
  ck_assert_int_eq(pair->mem->creator.pid, getpid());
  ck_assert_uint_eq(pair->mem->creator.magic, MPN_PAIR_MAGIC);
  mpn_pair_unmap(pair, 0);
  ck_assert(!name_exists(k));
}
END_TEST

/* Where a file cannot be made whole before its name (no O_TMPFILE), the
 * creator makes it by name and stamps it after shm_open, as before. */
START_TEST(no_tmpfile_makes_by_name) {
  uint64_t k = test_key(9);
  mpn_pair_t* pair = NULL;
  no_tmpfile = 1;
  ncclResult_t res = mpn_pair_map(k, 0, 1, NULL, &pair);
  no_tmpfile = 0;
  ck_assert_int_eq(tmpfile_refused, 1);
  ck_assert_int_eq(res, ncclSuccess);
  ck_assert_int_eq(pair->created, 1);
  ck_assert(name_exists(k));
  ck_assert_int_eq(pair->mem->creator.pid, getpid());
  ck_assert_uint_eq(pair->mem->creator.magic, MPN_PAIR_MAGIC);
  mpn_pair_unmap(pair, 0);
  ck_assert(!name_exists(k));
}
END_TEST

/* An unmap whose CUDA calls wait (cudaFree and cudaHostUnregister may wait
 * for the whole device) holds up no other thread's mapping. */
START_TEST(slow_unmap_holds_up_no_mapping) {
  uint64_t kx = test_key(6), ky = test_key(7);
  mapper_t a, other;
  mapper_start(&a, kx, NULL); /* made here, nobody's yet: no wait for a peer */
  ck_assert(mapper_wait(&a, 3.0));
  pthread_join(a.thread, NULL);
  ck_assert_int_eq(a.res, ncclSuccess);
  __atomic_store_n(&unregister_held, 1, __ATOMIC_RELEASE);
  pthread_t unmapper;
  ck_assert_int_eq(pthread_create(&unmapper, NULL, unmapper_main, a.pair), 0);
  for (int i = 0; i < 3000 && !__atomic_load_n(&unregister_inside, __ATOMIC_ACQUIRE); i++) usleep(1000);
  ck_assert_msg(__atomic_load_n(&unregister_inside, __ATOMIC_ACQUIRE), "the unmap never unregistered");
  mapper_start(&other, ky, NULL);
  int in_time = mapper_wait(&other, 2.0);
  __atomic_store_n(&unregister_held, 0, __ATOMIC_RELEASE);
  pthread_join(unmapper, NULL);
  pthread_join(other.thread, NULL);
  ck_assert_msg(in_time, "mapping a pair waited for another pair's unmap (its CUDA calls)");
  ck_assert_int_eq(other.res, ncclSuccess);
  mpn_pair_unmap(other.pair, 0);
  ck_assert(!name_exists(kx) && !name_exists(ky));
}
END_TEST

/* A pair made here whose peer had not opened it when this side let go
 * keeps its device block for the peer, freed once the peer took the name;
 * after a reset of the device (core/renew.h) the block went with the old
 * context, and a cudaFree of its address could free new memory: it is
 * forgotten instead. */
static mpn_pair_t* kept_pair(uint64_t key) {
  mpn_pair_t* p = NULL;
  ck_assert_int_eq(mpn_pair_map(key, 0, 1, NULL, &p), ncclSuccess);
  ck_assert_int_eq(p->created, 1);
  ck_assert_ptr_eq((void*)p->dflags, FAKE_BLOCK);
  mpn_pair_unmap(p, 1); /* (another process's pair, which it never opened) */
  return p;
}

static void peer_takes(uint64_t key) {
  char name[96];
  pair_name(name, sizeof(name), key);
  ck_assert_int_eq(shm_unlink(name), 0);
}

START_TEST(kept_block_after_reset) {
  setenv("MPINCCL_FLAGS", "device", 1);
  setenv("MPINCCL_EAGER_GRAPH", "0", 1);
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  uint64_t k1 = test_key(8), k2 = test_key(9), k3 = test_key(10);
  int before = mpn_pair_kept();
  kept_pair(k1);
  ck_assert_int_eq(mpn_pair_kept(), before + 1);
  peer_takes(k1);
  freed_block = NULL;
  kept_pair(k2); /* its unmap reaps k1, taken: the block is freed */
  ck_assert_ptr_eq(freed_block, FAKE_BLOCK);
  mpn_pair_forget_device(0); /* the device was reset */
  peer_takes(k2);
  freed_block = NULL;
  kept_pair(k3); /* reaps k2: its block went with the old context */
  ck_assert_ptr_null(freed_block);
  ck_assert_int_eq(mpn_pair_kept(), before + 1); /* k3, kept for its peer */
  peer_takes(k3);
  setenv("MPINCCL_FLAGS", "host", 1);
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
}
END_TEST

int main(void) {
  setenv("MPINCCL_FLAGS", "host", 1);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "20", 1);
  if (mpn_params_reload() != ncclSuccess) return EXIT_FAILURE; /* (read once, as the library does at start) */
  Suite* s = suite_create("pair_setup");
  TCase* tc = tcase_create("setup");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, wait_holds_up_no_other_pair);
  tcase_add_test(tc, failed_setup_ends_waiters);
  tcase_add_test(tc, failed_adopt_tells_creator);
  tcase_add_test(tc, dead_creator_ends_wait);
  tcase_add_test(tc, abort_ends_adopt_wait);
  tcase_add_test(tc, failed_device_pointer_unregisters);
  tcase_add_test(tc, slow_unmap_holds_up_no_mapping);
  tcase_add_test(tc, creator_killed_before_stamp_leaves_nothing);
  tcase_add_test(tc, no_tmpfile_makes_by_name);
  tcase_add_test(tc, kept_block_after_reset);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
