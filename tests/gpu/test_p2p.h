/*
 * test_p2p.h - the steps of test_p2p that live in test_p2p_paths.c (the
 * protocol's paths: inbox, delegation, limits, pushes, copy grids),
 * test_p2p_buffers.c (the buffers a message names) and test_p2p_closes.c
 * (closes of CUDA IPC imports), and what they share with test_p2p.c.
 */
#ifndef MPN_TESTS_GPU_TEST_P2P_H_
#define MPN_TESTS_GPU_TEST_P2P_H_

#include <stddef.h>

/** cudaMalloc'd device memory (at least 1 byte); exits on failure. */
void* dev_alloc(size_t bytes);

/** Many small messages in a row take the inbox. */
void many_small(void);
/** A host far ahead of its peer: messages 512 ahead wait on the host. */
void host_ahead(void);
/** Messages 512 apart on two streams. */
void streams_wrap(void);
/** Messages of the inbox's big slots. */
void big_inbox(void);
/** Launches with several processes of a time-sliced GPU take the inbox. */
void sliced_inbox(void);
/** A pair of processes switches between delegation and the inbox. */
void sliced_pair(void);
/** The flag kernel's copies over several blocks. */
void grid_copies(void);
/** Between GPUs, each side pushes its own large sends. */
void push_own(void);
/** More than 512 messages per peer and direction in one group are refused. */
void group_limit(void);
/** Whether messages with peer may take the pair's inbox (test_p2p_paths.c). */
int inbox_between(int peer, int several_peers, int big);

/* test_p2p_buffers.c */
/** A buffer shorter than its message, to another process, is refused. */
void short_buffer(void);
/** The same within this process, and pageable host memory. */
void short_here(void);
/** Managed and pinned host memory within this process move whole. */
void other_memory(void);

/* test_p2p_closes.c */
/** A new buffer over a freed one the peer still maps goes through a stage. */
void in_the_way(void);
/** A launch beside a close that waits for the application's stream returns
 * (ranks 0 and 1 on different GPUs). */
void beside_a_close(void);

#endif /* MPN_TESTS_GPU_TEST_P2P_H_ */
