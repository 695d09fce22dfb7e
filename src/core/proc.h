/*
 * proc.h - whether a process of this host is still the one a peer described
 * at creation: its PID, and its start time so that a new process given the
 * same PID is not taken for it.
 */
#ifndef MPN_CORE_PROC_H_
#define MPN_CORE_PROC_H_

#include <stdint.h>

/**
 * Start time of process pid (field 22 of /proc/<pid>/stat, clock ticks since
 * boot); 0 when unknown (/proc unreadable, or showing another PID namespace).
 */
uint64_t mpn_proc_start_time(int pid);

/**
 * True when process pid has ended: it no longer exists (kill gives ESRCH),
 * it is a zombie not yet reaped (state Z or X), or start_time is not 0 and
 * differs from the start time of the process that holds pid now (PID
 * reused).  A process that exists but whose /proc entry cannot be read
 * counts as alive; so does one that we may not signal (EPERM).
 */
int mpn_proc_gone(int pid, uint64_t start_time);

/** This process's PID namespace (inode of /proc/self/ns/pid), 0 when
 * unknown: pids of other processes mean something only inside the same one. */
uint64_t mpn_proc_pidns(void);

/** Starts fn(arg) on a detached thread of this process; 0, or the errno
 *  of pthread_create. */
int mpn_proc_thread_detached(void* (*fn)(void*), void* arg);

#endif /* MPN_CORE_PROC_H_ */
