/*
 * test_ipc_held.c - the list of held imports each process publishes
 * (src/cuda/ipc_held.c): what an owner reads from it, across processes,
 * when it overflows, and its file's life (gone at exit, swept after a
 * kill).  No GPU needed: the list is plain shared memory.
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/proc.h"
#include "cuda/ipc_held.h"
#include "run_suite.h"

enum { OWNER = 0x77, OTHER = 0x78 };

static mpn_ipc_closing_t open_of(uint64_t owner, uint64_t base, uint64_t size) {
  return (mpn_ipc_closing_t){.owner = owner, .base = base, .size = size, .dev = 0};
}

static int in_way(uint64_t owner, uint64_t base, uint64_t size) {
  mpn_ipc_held_proc_t me = mpn_ipc_held_self();
  return mpn_ipc_held_in_way(&me, owner, base, size);
}

/* Whether peer's file is in /dev/shm. */
static int file_there(const mpn_ipc_held_proc_t* peer) {
  char name[96];
  mpn_ipc_held_name(peer, name, sizeof(name));
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

START_TEST(overlapping_not_exact) {
  mpn_ipc_closing_t c = open_of(OWNER, 0x10000, 0x4000);
  ck_assert_int_eq(in_way(OWNER, 0x12000, 0x4000), 0); /* nothing held yet */
  mpn_ipc_held_add(&c);
  ck_assert_int_eq(mpn_ipc_held_count(), 1);
  ck_assert_int_eq(in_way(OWNER, 0x12000, 0x4000), 1); /* a new allocation over the end of it */
  ck_assert_int_eq(in_way(OWNER, 0x11000, 0x1000), 1); /* inside it */
  ck_assert_int_eq(in_way(OWNER, 0x10000, 0x4000), 0); /* exactly it: the peer borrows the mapping */
  ck_assert_int_eq(in_way(OWNER, 0x14000, 0x1000), 0); /* next to it */
  ck_assert_int_eq(in_way(OTHER, 0x12000, 0x4000), 0); /* another owner's addresses */
  mpn_ipc_held_remove(&c);
  ck_assert_int_eq(mpn_ipc_held_count(), 0);
  ck_assert_int_eq(in_way(OWNER, 0x12000, 0x4000), 0);
}
END_TEST

/* The driver counts opens of one handle: each close unlists one. */
START_TEST(counted_opens) {
  mpn_ipc_closing_t c = open_of(OWNER, 0x20000, 0x2000);
  mpn_ipc_held_add(&c);
  mpn_ipc_held_add(&c);
  mpn_ipc_held_remove(&c);
  ck_assert_int_eq(in_way(OWNER, 0x21000, 0x2000), 1);
  mpn_ipc_held_remove(&c);
  ck_assert_int_eq(in_way(OWNER, 0x21000, 0x2000), 0);
  mpn_ipc_held_remove(&c); /* nothing listed: no harm */
  ck_assert_int_eq(mpn_ipc_held_count(), 0);
}
END_TEST

/* Opens past the list's room make every range look held, until they go. */
START_TEST(overflow_assumes_the_worst) {
  for (uint64_t i = 0; i <= MPN_IPC_HELD_MAX; i++) {
    mpn_ipc_closing_t c = open_of(OWNER, 0x100000ull * (i + 1), 0x1000);
    mpn_ipc_held_add(&c);
  }
  ck_assert_int_eq(mpn_ipc_held_count(), MPN_IPC_HELD_MAX + 1);
  ck_assert_int_eq(in_way(OTHER, 0x5000, 0x1000), 1);
  mpn_ipc_closing_t last = open_of(OWNER, 0x100000ull * (MPN_IPC_HELD_MAX + 1), 0x1000);
  mpn_ipc_held_remove(&last);
  ck_assert_int_eq(in_way(OTHER, 0x5000, 0x1000), 0);
  ck_assert_int_eq(in_way(OWNER, 0x100800, 0x1000), 1); /* a listed one still counts */
  for (uint64_t i = 0; i < MPN_IPC_HELD_MAX; i++) {
    mpn_ipc_closing_t c = open_of(OWNER, 0x100000ull * (i + 1), 0x1000);
    mpn_ipc_held_remove(&c);
  }
  ck_assert_int_eq(mpn_ipc_held_count(), 0);
}
END_TEST

/* Another process reads the list through the file: a child asks about
 * the parent (this test's process). */
START_TEST(read_by_another_process) {
  mpn_ipc_closing_t c = open_of(OWNER, 0x30000, 0x4000);
  mpn_ipc_held_add(&c);
  mpn_ipc_held_proc_t parent = mpn_ipc_held_self();
  int answers[3] = {-1, -1, -1};
  for (int k = 0; k < 3; k++) {
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
      uint64_t base = k == 0 ? 0x32000 : k == 1 ? 0x30000 : 0x90000;
      _exit(mpn_ipc_held_in_way(&parent, OWNER, base, 0x4000));
    }
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status));
    answers[k] = WEXITSTATUS(status);
  }
  ck_assert_int_eq(answers[0], 1); /* overlapping */
  ck_assert_int_eq(answers[1], 0); /* exact */
  ck_assert_int_eq(answers[2], 0); /* elsewhere */
  /* A forked child writes nothing into the parent's list. */
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    mpn_ipc_closing_t other = open_of(OTHER, 0x50000, 0x1000);
    mpn_ipc_held_add(&other);
    mpn_ipc_held_remove(&c);
    _exit(0);
  }
  ck_assert_int_eq(waitpid(child, NULL, 0), child);
  ck_assert_int_eq(in_way(OTHER, 0x50800, 0x1000), 0);
  ck_assert_int_eq(in_way(OWNER, 0x32000, 0x4000), 1);
}
END_TEST

/* A process that published nothing holds nothing. */
START_TEST(unpublished_holds_nothing) {
  mpn_ipc_held_proc_t nobody = mpn_ipc_held_self();
  nobody.start_time += 12345; /* no file has this name */
  ck_assert_int_eq(mpn_ipc_held_in_way(&nobody, OWNER, 0, UINT64_MAX), 0);
}
END_TEST

/* A list caught in the middle of a change for too long (its writer
 * stopped there, say) counts as holding every range. */
START_TEST(stuck_writer_assumes_the_worst) {
  mpn_ipc_held_publish();
  mpn_ipc_held_proc_t me = mpn_ipc_held_self();
  char name[96];
  mpn_ipc_held_name(&me, name, sizeof(name));
  int fd = shm_open(name, O_RDWR, 0);
  ck_assert_int_ge(fd, 0);
  /* (the sequence word opens the file: src/cuda/ipc_held.c) */
  uint64_t* seq = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ck_assert(seq != MAP_FAILED);
  ck_assert_int_eq(in_way(OTHER, 0x5000, 0x1000), 0);
  __atomic_add_fetch(seq, 1, __ATOMIC_RELEASE); /* odd: being changed */
  ck_assert_int_eq(in_way(OTHER, 0x5000, 0x1000), 1);
  __atomic_add_fetch(seq, 1, __ATOMIC_RELEASE);
  ck_assert_int_eq(in_way(OTHER, 0x5000, 0x1000), 0);
  munmap(seq, sizeof(uint64_t));
}
END_TEST

/* A child publishes and exits (its file goes), or is killed (its file
 * stays until a sweep). */
static mpn_ipc_held_proc_t child_publishes(int killed) {
  int ready[2], go[2];
  ck_assert_int_eq(pipe(ready), 0);
  ck_assert_int_eq(pipe(go), 0);
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    close(go[1]);
    mpn_ipc_closing_t c = open_of(OWNER, 0x40000, 0x1000);
    mpn_ipc_held_add(&c);
    char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(2);
    while (read(go[0], &one, 1) > 0) { /* until the parent closes it (or kills this child) */
    }
    exit(0); /* (atexit handlers run) */
  }
  close(go[0]);
  char one = 0;
  ck_assert_int_eq(read(ready[0], &one, 1), 1);
  mpn_ipc_held_proc_t who = {.pidns = mpn_proc_pidns(), .pid = child, .start_time = mpn_proc_start_time(child)};
  ck_assert(file_there(&who));
  ck_assert_int_eq(mpn_ipc_held_in_way(&who, OWNER, 0x40800, 0x1000), 1);
  if (killed) kill(child, SIGKILL);
  close(go[1]);
  ck_assert_int_eq(waitpid(child, NULL, 0), child);
  close(ready[0]);
  close(ready[1]);
  return who;
}

START_TEST(gone_at_exit) {
  mpn_ipc_held_proc_t who = child_publishes(0);
  ck_assert(!file_there(&who));
}
END_TEST

START_TEST(swept_after_kill) {
  mpn_ipc_held_proc_t who = child_publishes(1);
  ck_assert(file_there(&who));
  ck_assert_int_ge(mpn_ipc_held_sweep(), 1);
  ck_assert(!file_there(&who));
  mpn_ipc_held_publish(); /* sweeps too, but this process's own file lives, so it stays */
  mpn_ipc_held_proc_t me = mpn_ipc_held_self();
  ck_assert(file_there(&me));
  ck_assert_int_eq(mpn_ipc_held_sweep(), 0);
  ck_assert(file_there(&me));
}
END_TEST

int main(void) {
  Suite* s = suite_create("ipc_held");
  TCase* tc = tcase_create("held");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, overlapping_not_exact);
  tcase_add_test(tc, counted_opens);
  tcase_add_test(tc, overflow_assumes_the_worst);
  tcase_add_test(tc, read_by_another_process);
  tcase_add_test(tc, unpublished_holds_nothing);
  tcase_add_test(tc, stuck_writer_assumes_the_worst);
  tcase_add_test(tc, gone_at_exit);
  tcase_add_test(tc, swept_after_kill);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
