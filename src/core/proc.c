/*
 * proc.c - process liveness from kill(pid, 0) and /proc/<pid>/stat: a dead
 * process not yet reaped still answers kill, and so does a new process that
 * got a dead one's PID, so the state and the start time are read as well.
 * Also the library's detached threads (watchdog, proxy, services).
 */
#include "core/proc.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* /proc numbers processes as our PID namespace does: one mounted from
 * another namespace (a container given the host's) would name other
 * processes, and a healthy peer would look dead. */
static int proc_is_ours(void) {
  char buf[32];
  ssize_t n = readlink("/proc/self", buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  buf[n] = '\0';
  return atoi(buf) == (int)getpid();
}

/* State (field 3) and start time (field 22) of /proc/<pid>/stat; 0 on
 * success.  Field 2, the command name, is in parentheses and may hold
 * spaces and ')', but no field after it does: fields count from the last ')'. */
static int proc_stat_read(int pid, char* state, uint64_t* start_time) {
  char path[64], line[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(line, 1, sizeof(line) - 1, f);
  fclose(f);
  line[n] = '\0';
  const char* p = strrchr(line, ')');
  if (!p || p[1] != ' ' || p[2] == '\0') return -1;
  char s = p[2];
  p += 3;
  unsigned long long v = 0;
  for (int field = 4; field <= 22; field++) { /* numbers, some of them negative */
    char* end;
    v = strtoull(p, &end, 10);
    if (end == p) return -1;
    p = end;
  }
  *state = s;
  *start_time = (uint64_t)v;
  return 0;
}

uint64_t mpn_proc_start_time(int pid) {
  char state;
  uint64_t start;
  if (pid <= 0 || !proc_is_ours() || proc_stat_read(pid, &state, &start) != 0) return 0;
  return start;
}

int mpn_proc_gone(int pid, uint64_t start_time) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) == -1 && errno == ESRCH) return 1;
  char state;
  uint64_t now;
  if (!proc_is_ours() || proc_stat_read(pid, &state, &now) != 0) return 0;
  if (state == 'Z' || state == 'X') return 1;
  return start_time != 0 && now != start_time;
}

uint64_t mpn_proc_pidns(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int mpn_proc_thread_detached(void* (*fn)(void*), void* arg) {
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return err;
}
