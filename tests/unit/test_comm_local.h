/*
 * test_comm_local.h - what the sources of test_comm_local share: the helpers
 * test_comm_local.c and test_comm_local_create.c define, and the functions
 * with which each topic's file adds its tests to the program's one test case.
 */
#ifndef MPN_TESTS_UNIT_TEST_COMM_LOCAL_H_
#define MPN_TESTS_UNIT_TEST_COMM_LOCAL_H_

#include <check.h>

#include "nccl.h"

/* The most ranks a test makes (a thread each, or a made-up topology). */
#define MAXR 8

/** Whether text contains part (test_comm_local.c). */
int contains(const char* text, const char* part);

/** Creates n ranks of one new communicator from this thread, inside a group
 * (test_comm_local_create.c). */
void group_create(ncclComm_t* comms, int n);

/* Each adds its file's tests to tc, in the order they run. */
/** Creation, rendezvous, split, non-blocking creation, abort and destroy. */
void comm_local_add_create(TCase* tc);
/** The argument checks of the data calls, registration and last errors. */
void comm_local_add_checks(TCase* tc);
/** Peers: the watchdog, the GPUs reached, pushed sends, alias streams. */
void comm_local_add_peers(TCase* tc);
/** The bootstrap: its collectives, a failed split's text, a forked child. */
void comm_local_add_bootstrap(TCase* tc);
/** Window registration in groups, refused groups, splits and aborts. */
void comm_local_add_windows(TCase* tc);

#endif /* MPN_TESTS_UNIT_TEST_COMM_LOCAL_H_ */
