/*
 * debug.h - logging for mpinccl: levels and subsystems chosen with NCCL's
 * variables (NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE).
 */
#ifndef MPN_CORE_DEBUG_H_
#define MPN_CORE_DEBUG_H_

#include <stdarg.h>

typedef enum {
  MPN_LOG_NONE = 0,
  MPN_LOG_VERSION = 1,
  MPN_LOG_WARN = 2,
  MPN_LOG_INFO = 3,
  MPN_LOG_TRACE = 4
} mpn_log_level_t;

/* Subsystems, as selected by NCCL_DEBUG_SUBSYS. */
enum {
  MPN_SUBSYS_INIT = 1u << 0,
  MPN_SUBSYS_BOOTSTRAP = 1u << 1,
  MPN_SUBSYS_P2P = 1u << 2,
  MPN_SUBSYS_RMA = 1u << 3,
  MPN_SUBSYS_IPC = 1u << 4,
  MPN_SUBSYS_NET = 1u << 5,
  MPN_SUBSYS_PROXY = 1u << 6,
  MPN_SUBSYS_ENV = 1u << 7,
  MPN_SUBSYS_ALL = ~0u
};

/** Level and subsystem mask in force, read from the environment at the first
 *  message and again after mpn_log_reset; a level below 0 means not read yet. */
extern int mpn_log_level;
extern unsigned mpn_log_subsys;

/** Reads NCCL_DEBUG* once (thread-safe); cheap after the first call. */
void mpn_log_init(void);

/** Forgets the settings read and closes NCCL_DEBUG_FILE's file, so that the
 *  next message reads NCCL_DEBUG* again (ncclResetDebugInit). */
void mpn_log_reset(void);

/** Parses a NCCL_DEBUG_SUBSYS value ("INIT,P2P", "^NET", "ALL"). */
unsigned mpn_log_parse_subsys(const char* spec);

/** Parses a NCCL_DEBUG value; returns -1 for an unknown level. */
int mpn_log_parse_level(const char* spec);

/** Formats and writes one line; callers go through the macros below. */
void mpn_log(int level, unsigned subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

/** True when a message of this level and subsystem would be written. */
static inline int mpn_log_enabled(int level, unsigned subsys) {
  if (mpn_log_level < 0) mpn_log_init();
  return level <= mpn_log_level && (level <= MPN_LOG_WARN || (subsys & mpn_log_subsys));
}

#define MPN_LOG_AT(lvl, sub, ...) \
  do { \
    if (mpn_log_enabled((lvl), (sub))) mpn_log((lvl), (sub), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define MPN_WARN(...) MPN_LOG_AT(MPN_LOG_WARN, MPN_SUBSYS_ALL, __VA_ARGS__)
#define MPN_INFO(sub, ...) MPN_LOG_AT(MPN_LOG_INFO, (sub), __VA_ARGS__)
#define MPN_TRACE(sub, ...) MPN_LOG_AT(MPN_LOG_TRACE, (sub), __VA_ARGS__)

#endif /* MPN_CORE_DEBUG_H_ */
