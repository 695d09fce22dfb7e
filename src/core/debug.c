/*
 * debug.c - log output: one line per message, prefixed with host, process and
 * thread, to stderr or to the file named by NCCL_DEBUG_FILE (%h host, %p pid);
 * ncclResetDebugInit makes the next message read the settings again.
 */
#include "core/debug.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/api.h"

int mpn_log_level = -1;
unsigned mpn_log_subsys = MPN_SUBSYS_INIT | MPN_SUBSYS_ENV;

static FILE* log_file;
static char log_host[64];
/* Taken by (re)initialization and by every write, so that a reset never
 * closes the file under a writer. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct {
  const char* name;
  unsigned bit;
} subsys_names[] = {
    {"INIT", MPN_SUBSYS_INIT}, {"BOOTSTRAP", MPN_SUBSYS_BOOTSTRAP}, {"P2P", MPN_SUBSYS_P2P},
    {"RMA", MPN_SUBSYS_RMA},   {"IPC", MPN_SUBSYS_IPC},             {"NET", MPN_SUBSYS_NET},
    {"PROXY", MPN_SUBSYS_PROXY}, {"ENV", MPN_SUBSYS_ENV},           {"ALL", MPN_SUBSYS_ALL},
};

int mpn_log_parse_level(const char* spec) {
  static const char* names[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
  if (spec == NULL || *spec == '\0') return MPN_LOG_NONE;
  for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
    if (strcasecmp(spec, names[i]) == 0) return i;
  if (strcasecmp(spec, "ABORT") == 0) return MPN_LOG_WARN;
  return -1;
}

unsigned mpn_log_parse_subsys(const char* spec) {
  if (spec == NULL || *spec == '\0') return MPN_SUBSYS_INIT | MPN_SUBSYS_ENV;
  int invert = spec[0] == '^';
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", spec + invert);
  char* save = NULL;
  for (char* tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0) mask |= subsys_names[i].bit;
  }
  return invert ? ~mask : mask;
}

/* Expands %h and %p in NCCL_DEBUG_FILE. */
static void log_open_file(const char* pattern) {
  char path[1024];
  size_t n = 0;
  for (const char* p = pattern; *p && n + 1 < sizeof(path); p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int w = p[1] == 'h' ? snprintf(path + n, sizeof(path) - n, "%s", log_host)
                          : snprintf(path + n, sizeof(path) - n, "%d", (int)getpid());
      n += (w > 0 && (size_t)w < sizeof(path) - n) ? (size_t)w : 0;
      p++;
    } else {
      path[n++] = *p;
    }
  }
  path[n] = '\0';
  FILE* f = fopen(path, "w");
  if (f) {
    setvbuf(f, NULL, _IOLBF, 0);
    log_file = f;
  } else {
    fprintf(stderr, "mpinccl: cannot open NCCL_DEBUG_FILE %s; logging to stderr\n", path);
  }
}

/* Reads NCCL_DEBUG*; called with log_lock held. */
static void log_init_locked(void) {
  if (log_host[0] == '\0') { /* once: writers read it without the lock */
    gethostname(log_host, sizeof(log_host) - 1);
    char* dot = strchr(log_host, '.');
    if (dot) *dot = '\0';
  }
  const char* lvl = getenv("NCCL_DEBUG");
  int level = mpn_log_parse_level(lvl);
  if (level < 0) {
    fprintf(stderr, "mpinccl: NCCL_DEBUG=%s is not one of VERSION, WARN, INFO, TRACE; using WARN\n",
            lvl);
    level = MPN_LOG_WARN;
  }
  mpn_log_subsys = mpn_log_parse_subsys(getenv("NCCL_DEBUG_SUBSYS"));
  const char* file = getenv("NCCL_DEBUG_FILE");
  if (file && *file && level > MPN_LOG_NONE) log_open_file(file);
  __atomic_store_n(&mpn_log_level, level, __ATOMIC_RELEASE);
}

void mpn_log_init(void) {
  pthread_mutex_lock(&log_lock);
  if (__atomic_load_n(&mpn_log_level, __ATOMIC_ACQUIRE) < 0) log_init_locked();
  pthread_mutex_unlock(&log_lock);
}

void mpn_log_reset(void) {
  pthread_mutex_lock(&log_lock);
  if (log_file) fclose(log_file);
  log_file = NULL;
  __atomic_store_n(&mpn_log_level, -1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&log_lock);
}

MPN_API(void, ncclResetDebugInit, void) { mpn_log_reset(); }

static const char* level_name(int level) {
  switch (level) {
    case MPN_LOG_WARN: return "WARN";
    case MPN_LOG_INFO: return "INFO";
    case MPN_LOG_TRACE: return "TRACE";
    default: return "VERSION";
  }
}

void mpn_log(int level, unsigned subsys, const char* file, int line, const char* fmt, ...) {
  (void)subsys;
  char msg[2048];
  int n = snprintf(msg, sizeof(msg), "%s:%d:%d MPINCCL %s ", log_host, (int)getpid(),
                   (int)syscall(SYS_gettid), level_name(level));
  if (level == MPN_LOG_TRACE && n > 0 && (size_t)n < sizeof(msg)) {
    const char* base = strrchr(file, '/');
    n += snprintf(msg + n, sizeof(msg) - n, "%s:%d ", base ? base + 1 : file, line);
  }
  if (n > 0 && (size_t)n < sizeof(msg)) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_lock(&log_lock);
  fprintf(log_file ? log_file : stderr, "%s\n", msg);
  pthread_mutex_unlock(&log_lock);
}
