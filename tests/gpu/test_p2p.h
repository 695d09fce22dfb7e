/*
 * test_p2p.h - what the files of test_p2p share: test_p2p.c's buffers and
 * ring, and the steps that live in test_p2p_paths.c (the protocol's paths:
 * inbox, delegation, limits, pushes, copy grids), test_p2p_buffers.c (the
 * buffers a message names), test_p2p_closes.c (closes of CUDA IPC
 * imports), test_p2p_patterns.c (patterns of messages), test_p2p_graphs.c
 * (CUDA graphs) and test_p2p_comms.c (more than one communicator).
 */
#ifndef MPN_TESTS_GPU_TEST_P2P_H_
#define MPN_TESTS_GPU_TEST_P2P_H_

#include <stddef.h>

#include "mpinccl.h"

/* test_p2p.c */
/** cudaMalloc'd device memory (at least 1 byte); exits on failure. */
void* dev_alloc(size_t bytes);
/** Where a test buffer comes from. */
typedef enum { BUF_DEVICE, BUF_POOL, BUF_HOST } buf_kind_t;
/** A buffer of bytes of kind (BUF_POOL: from the test stream's pool). */
char* buf_alloc(buf_kind_t kind, size_t bytes);
/** Frees p, a buffer of buf_alloc of kind. */
void buf_free(buf_kind_t kind, char* p);
/** Each rank sends bytes to rank+shift and receives from rank-shift, in one
 * group, count elements of type at offset; checked. */
void ring(size_t bytes, int shift, ncclDataType_t type, size_t offset);

/* test_p2p_paths.c */
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

/** Buffers of CUDA's virtual memory API, also over two mappings (test_p2p_buffers.c). */
void vmm_buffers(void);

/* test_p2p_closes.c */
/** A new buffer over a freed one the peer still maps goes through a stage. */
void in_the_way(void);
/** A launch beside a close that waits for the application's stream returns
 * (ranks 0 and 1 on different GPUs). */
void beside_a_close(void);

/* test_p2p_patterns.c */
/** Everybody to everybody (self included) in one group; sizes differ per pair. */
void all_to_all(size_t base);
/** Root 0 scatters, then gathers; plus null peers and empty messages. */
void scatter_gather(size_t bytes);
/** Several messages to the same peer in one group arrive in program order. */
void same_peer_order(void);
/** A group against separate launches of the peer (docs/P2P.md, known problem 8). */
void split_launches(void);
/** A chain through three processes that the receiver's group must not block. */
void chain_three(void);
/** 3D periodic halo, all 26 neighbours in one group, faces of face bytes;
 * replays > 0: captured in a CUDA graph and replayed that often. */
void halo26(int replays, size_t face);
/** halo26 with faces of 256 KiB. */
void halo26_wide(void);
/** halo26 in a CUDA graph, replayed 20 times. */
void graph_halo(void);

/* test_p2p_graphs.c */
/** A ring captured in a CUDA graph, replayed 100 times with new data each time. */
void graph_replay(void);
/** Small messages captured in a CUDA graph beside a larger one, replayed 100 times. */
void graph_small(void);
/** More captured messages of a pair than it has graph slots, in graphs destroyed after one replay. */
void graph_recapture(void);
/** Captures over new buffers: imports held open only while their graphs live. */
void graph_new_buffers(void);
/** Over UCX: a graph that outlives its communicator keeps its group until it is gone. */
void graph_outlives_comm(void);
/** One capture needing more than a pair's 256 graph slots is refused. */
void graph_same_capture(void);
/** More captured messages to one peer in one group than a pair has graph slots are refused. */
void graph_group_limit(void);
/** A pool buffer's stage held by a graph serves again once the graph is destroyed. */
void graph_pool_stage(void);
/** A captured group on two streams and two communicators: messages match in program order. */
void graph_two_streams(void);

/* test_p2p_comms.c */
/** Two communicators, two streams, opposite directions, in flight together. */
void two_comms(void);
/** Ranks of one process: ncclCommInitAll with a repeated device, one thread. */
void init_all_ring(void);
/** Ranks of one process on every GPU, one thread, on default stream handles. */
void init_all_devices(void);
/** Ranks of one process driven by one thread each. */
void threads_ring(void);
/** Ranks of one process, the second side always late: its "done" events go back to the pool. */
void threads_late_second_side(void);
/** A sender that destroys its communicator before its receiver posted. */
void sender_gone_first(void);
/** A rank's pair with itself goes with its communicator. */
void self_pairs_freed(void);
/** sender_gone_first in a loop: the pairs kept for the late receiver are freed. */
void sender_gone_loop(void);

#endif /* MPN_TESTS_GPU_TEST_P2P_H_ */
