/*
 * test_comm_local.c - communicators whose ranks all live in this process (no
 * MPI launcher needed; host-only without a GPU, else on the current device).
 * main puts the tests of test_comm_local_*.c, by topic, into one test case.
 */
#include <check.h>
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "run_suite.h"
#include "test_comm_local.h"

/* A crash prints the crashing thread's stack before Check reports the
 * signal: the rare crash in getenv seen on the GPU machine (a setenv of
 * some thread beside a getenv of another) says nothing more without it.
 * Only async-signal-safe calls, then the default action. */
static void crash_report(int sig) {
  static const char head[] = "test_comm_local: fatal signal; stack of the crashing thread:\n";
  void* frames[64];
  ssize_t written = write(STDERR_FILENO, head, sizeof(head) - 1);
  (void)written;
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

int contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

int main(void) {
  Suite* s = suite_create("comm_local");
  TCase* tc = tcase_create("comm_local");
  tcase_set_timeout(tc, 60);
  comm_local_add_create(tc);
  comm_local_add_checks(tc);
  comm_local_add_peers(tc);
  comm_local_add_bootstrap(tc);
  comm_local_add_windows(tc);
  suite_add_tcase(s, tc);
  /* Each test runs in a forked child, which inherits these handlers;
   * backtrace loads what it needs on its first call, here rather than in
   * the handler. */
  void* first[1];
  (void)backtrace(first, 1);
  signal(SIGSEGV, crash_report);
  signal(SIGBUS, crash_report);
  return unit_suite_run(s);
}
