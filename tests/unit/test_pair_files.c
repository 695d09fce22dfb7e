/*
 * test_pair_files.c - stale pair files in /dev/shm: a file whose creator was
 * killed before its peer opened it goes at the next process's sweep; one
 * whose creator lives, or that cannot be judged or is not ours, stays.  No
 * GPU needed (the first mapping fails without one, after its sweep).
 */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/proc.h"
#include "p2p/pair.h"
#include "run_suite.h"

/* The pid of the process that runs the tests (they may run in children). */
static unsigned runner;

/* A pair file's shm_open name for a key of this run. */
static void pair_name(char* out, size_t size, unsigned tag, int sender, int receiver) {
  unsigned long long key = 0x7e57000000000000ull | (unsigned long long)tag << 32 | runner;
  snprintf(out, size, "/mpinccl-%016llx-%d-%d", key, sender, receiver);
}

/* What a test that failed left of the names a run makes goes. */
static void remove_all(void) {
  for (unsigned tag = 1; tag <= 4; tag++)
    for (int receiver = 1; receiver <= 8; receiver++) {
      char name[96];
      pair_name(name, sizeof(name), tag, 0, receiver);
      shm_unlink(name);
      strcat(name, ".old");
      shm_unlink(name);
    }
}

/* Makes file name of size bytes, made by as (NULL: stamped by this process). */
static void make_file(const char* name, size_t size, const mpn_pair_creator_t* as) {
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
  mpn_pair_mem_t* mem = mmap(NULL, sizeof(*mem), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(mem, MAP_FAILED);
  close(fd);
  if (as)
    mem->creator = *as;
  else
    mpn_pair_stamp(mem);
  munmap(mem, sizeof(*mem));
}

/* The creator written in file name. */
static mpn_pair_creator_t creator_of(const char* name) {
  int fd = shm_open(name, O_RDONLY, 0);
  ck_assert_int_ge(fd, 0);
  mpn_pair_mem_t* mem = mmap(NULL, sizeof(*mem), PROT_READ, MAP_SHARED, fd, 0);
  ck_assert_ptr_ne(mem, MAP_FAILED);
  close(fd);
  mpn_pair_creator_t c = mem->creator;
  munmap(mem, sizeof(*mem));
  return c;
}

static int exists(const char* name) {
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

/* A child makes file name as its creator and is killed before anyone opens
 * it; returns what it wrote. */
static mpn_pair_creator_t make_killed(const char* name) {
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    mpn_pair_mem_t* mem = fd >= 0 && ftruncate(fd, sizeof(*mem)) == 0
                              ? mmap(NULL, sizeof(*mem), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                              : MAP_FAILED;
    if (mem == MAP_FAILED) _exit(1);
    mpn_pair_stamp(mem);
    raise(SIGKILL);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  mpn_pair_creator_t c = creator_of(name);
  ck_assert_int_eq(c.pid, child);
  ck_assert_uint_eq(c.magic, MPN_PAIR_MAGIC);
  ck_assert_uint_eq(c.pidns, mpn_proc_pidns());
  ck_assert_uint_ne(c.start_time, 0);
  return c;
}

START_TEST(sweep_judges_creators) {
  enum { DEAD, LIVE, REUSED, UNSTAMPED, OTHER_NS, OTHER_SIZE, NOT_OURS, OTHER_USER, N };
  char names[N][96];
  for (int i = 0; i < N; i++) pair_name(names[i], sizeof(names[i]), 1, 0, i + 1);
  strcat(names[NOT_OURS], ".old"); /* a name of ours with something after it is not ours */
  mpn_pair_creator_t dead = make_killed(names[DEAD]);
  make_file(names[LIVE], sizeof(mpn_pair_mem_t), NULL);
  mpn_pair_creator_t reused = creator_of(names[LIVE]);
  ck_assert_int_eq(reused.pid, getpid());
  reused.start_time++; /* the pid now belongs to another process */
  make_file(names[REUSED], sizeof(mpn_pair_mem_t), &reused);
  make_file(names[UNSTAMPED], sizeof(mpn_pair_mem_t), &(mpn_pair_creator_t){0});
  mpn_pair_creator_t other_ns = dead;
  other_ns.pidns++; /* the pid means another process there */
  make_file(names[OTHER_NS], sizeof(mpn_pair_mem_t), &other_ns);
  make_file(names[OTHER_SIZE], sizeof(mpn_pair_mem_t) + 4096, &dead);
  make_file(names[NOT_OURS], sizeof(mpn_pair_mem_t), &dead);
  make_file(names[OTHER_USER], sizeof(mpn_pair_mem_t), &dead);
  char path[128];
  snprintf(path, sizeof(path), "/dev/shm%s", names[OTHER_USER]);
  int other_user = geteuid() == 0 && chown(path, 65534, 65534) == 0; /* root only */

  mpn_pair_sweep(); /* (other processes of the host may sweep meanwhile too) */
  ck_assert_msg(!exists(names[DEAD]), "the file of a killed creator stayed");
  ck_assert_msg(!exists(names[REUSED]), "the file of a creator whose pid was reused stayed");
  for (int i = LIVE; i < N; i++) {
    if (i == REUSED) continue;
    ck_assert_msg(exists(names[i]) || (i == OTHER_USER && !other_user), "%s went", names[i]);
    shm_unlink(names[i]);
  }
}
END_TEST

/* Lines of file that hold text. */
static int log_lines_with(const char* file, const char* text) {
  FILE* f = fopen(file, "r");
  ck_assert_ptr_nonnull(f);
  char line[512];
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, text)) n++;
  fclose(f);
  return n;
}

/* A process's first mapping sweeps, also where it then fails (no GPU), and
 * a later one does not: the log tells (other processes of the host may
 * sweep meanwhile too). */
START_TEST(first_map_sweeps) {
  char dir[] = "/tmp/mpinccl-log-XXXXXX", log[64], dead[96];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(log, sizeof(log), "%s/log", dir);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "P2P", 1);
  setenv("NCCL_DEBUG_FILE", log, 1);
  ncclResetDebugInit();
  pair_name(dead, sizeof(dead), 2, 0, 1);
  mpn_pair_creator_t c = make_killed(dead);
  mpn_pair_t* pair = NULL;
  for (unsigned tag = 3; tag <= 4; tag++) {
    char name[96];
    unsigned long long key;
    pair_name(name, sizeof(name), tag, 0, 1);
    ck_assert_int_eq(sscanf(name, "/mpinccl-%16llx", &key), 1);
    if (mpn_pair_map(key, 0, 1, NULL, &pair) == ncclSuccess) mpn_pair_unmap(pair, 0);
  }
  ck_assert_msg(!exists(dead), "the first mapping left the file of a killed creator");
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv("NCCL_DEBUG_SUBSYS");
  unsetenv("NCCL_DEBUG");
  ncclResetDebugInit(); /* (closes the log) */
  char removed[160];
  snprintf(removed, sizeof(removed), "/dev/shm%s removed: the process that made it (pid %d) is gone", dead, c.pid);
  ck_assert_int_le(log_lines_with(log, removed), 1); /* (0: another process swept it first) */
  ck_assert_int_eq(log_lines_with(log, "stale pair files: "), 1);
  unlink(log);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite* s = suite_create("pair_files");
  TCase* tc = tcase_create("pair_files");
  tcase_add_test(tc, sweep_judges_creators);
  tcase_add_test(tc, first_map_sweeps);
  suite_add_tcase(s, tc);
  runner = (unsigned)getpid();
  int status = unit_suite_run(s);
  remove_all();
  return status;
}
