/*
 * test_rma.h - what the files of test_rma share: test_rma.c's memory and
 * windows, and the steps that live in test_rma_patterns.c (puts and signals
 * in patterns), test_rma_graphs.c (CUDA graphs) and test_rma_one_process.c
 * (ranks of one process).
 */
#ifndef MPN_TESTS_GPU_TEST_RMA_H_
#define MPN_TESTS_GPU_TEST_RMA_H_

#include <stddef.h>

#include "mpinccl.h"

/* test_rma.c */
/** ncclMemAlloc'd memory; exits on failure. */
void* dev_alloc(size_t bytes);
/** A window of bytes from ncclMemAlloc (*buf), cleared before any peer can
 * put into it. */
ncclWindow_t window(size_t bytes, void** buf);
/** Deregisters w once the test's stream is done, and frees buf. */
void window_free(ncclWindow_t w, void* buf);

/* test_rma_patterns.c */
/** Puts whose source is pinned host memory, into the next rank's window. */
void host_source(void);
/** Ranks 0 and 1 bounce a buffer of bytes back and forth, checking it every time. */
void pingpong(size_t bytes);
/** Signal every rank, wait for every rank, ten times, in one group each. */
void barrier(void);
/** Each rank puts a block into every rank's window in parts puts and waits for them. */
void alltoall(size_t block, int parts);
/** Many large puts to one peer, then one signal: seeing it, the peer sees all of them. */
void many_then_signal(void);
/** Signals that arrive before their wait is enqueued are kept. */
void early_signals(void);
/** Signals to one peer and context from two streams, the first held back. */
void signal_streams(void);
/** A barrier's signal to the rank itself, waited for from another stream. */
void self_lag(void);
/** A barrier waiting for every rank itself included, then a signal to itself on another stream. */
void self_order(void);
/** A wait for the rank's own signal enqueued before a barrier held back. */
void self_early_wait(void);
/** A signal to itself on a held stream, then a barrier on another, then a third signal. */
void self_after_other(void);
/** A ring of sends and a ring of puts in one group. */
void mixed_group(void);

/* test_rma_graphs.c */
/** A ring of put+signal and wait captured in a CUDA graph, replayed 100 times. */
void graph_replay(void);
/** Captured signals past a context's slots are refused before anything is enqueued. */
void graph_limits(void);
/** 20 captures through a context's 4 graph slots. */
void graph_recapture(void);
/** 300 captures through the 256 graph slots of one context. */
void graph_recapture_many(void);
/** A capture waits until a graph holding its context's slot is destroyed. */
void graph_slot_wait(void);
/** A destroy right after a replayed captured put, before the peer's wait replays. */
void graph_destroy_early(void);

/* test_rma_one_process.c */
/** Three ranks of one process, one thread each: a ring of puts. */
void threads_ring(void);
/** One thread registers three ranks' windows in one group and puts through them. */
void windows_in_group(void);
/** The same on non-blocking ranks outside groups: each call ncclInProgress, then polled. */
void windows_nonblocking(void);
/** Ranks of one process on every GPU, a ring of signals on default stream handles. */
void init_all_devices(void);
/** Three ranks of one process, one thread each, putting from two streams. */
void threads_streams(void);

#endif /* MPN_TESTS_GPU_TEST_RMA_H_ */
