/*
 * clock.h - the one clock the library's deadlines and waits use:
 * CLOCK_MONOTONIC in nanoseconds, and its times as the timespec that
 * pthread's clock-taking waits (pthread_cond_clockwait,
 * pthread_mutex_clocklock, pthread_rwlock_clockrdlock) expect.  A wall
 * clock set back or forward moves none of them.
 */
#ifndef MPINCCL_CORE_CLOCK_H
#define MPINCCL_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

/** CLOCK_MONOTONIC's time in nanoseconds. */
static inline uint64_t mpn_clock_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/** The CLOCK_MONOTONIC time at_ns (from mpn_clock_now_ns) as a timespec. */
static inline struct timespec mpn_clock_timespec(uint64_t at_ns) {
  struct timespec t = {(time_t)(at_ns / 1000000000ull), (long)(at_ns % 1000000000ull)};
  return t;
}

/** The CLOCK_MONOTONIC time in_ns from now, as a timespec. */
static inline struct timespec mpn_clock_after(uint64_t in_ns) { return mpn_clock_timespec(mpn_clock_now_ns() + in_ns); }

/** The CLOCK_MONOTONIC time ms milliseconds from now (none when ms <= 0). */
static inline struct timespec mpn_clock_after_ms(int64_t ms) {
  return mpn_clock_after(ms > 0 ? (uint64_t)ms * 1000000ull : 0);
}

#endif
