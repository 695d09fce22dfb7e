/*
 * harness.h - what the GPU tests run under mpirun share (test_p2p,
 * test_rma): one communicator over MPI_COMM_WORLD and a stream, failures
 * counted with the rank and the communicator's last error, checks of the
 * pattern of pattern.h, steps that can be selected from the environment,
 * and SKIP (exit 77) without a GPU.
 */
#ifndef MPN_TESTS_HARNESS_H_
#define MPN_TESTS_HARNESS_H_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "mpinccl.h"

extern int rank, nranks, failures;
extern ncclComm_t comm;
extern cudaStream_t stream;

#define EXPECT(cond) \
  do { \
    if (!(cond)) { \
      fprintf(stderr, "[rank %d] %s:%d: expected %s (%s)\n", rank, __FILE__, __LINE__, #cond, \
              ncclGetLastError(comm)); \
      failures++; \
    } \
  } while (0)
#define EXPECT_OK(call) EXPECT((call) == ncclSuccess)

/* A refusal: its code, and text in the message of the harness's comm. */
#define EXPECT_ERR(call, code, text) \
  do { \
    EXPECT((call) == (code)); \
    EXPECT(strstr(ncclGetLastError(comm), (text)) != NULL); \
  } while (0)

/** The pattern seed of the k-th message from src to dst. */
uint32_t seed_of(int src, int dst, int k);

/** Holds stream s back on the GPU for about ms milliseconds from when it
 * gets there (a host function that sleeps; no kernel, no rank polled). */
void hold_stream(cudaStream_t s, unsigned ms);

/** Counts a failure when bytes at buf differ from the pattern of seed (synchronizes stream). */
void expect_pattern(const void* buf, size_t bytes, uint32_t seed, const char* what);

/**
 * With --np-list prints np_list and returns 0 (the caller exits with it);
 * without a GPU returns 77; else sets up MPI, the device, the stream and
 * comm and returns -1.  env_prefix names the variables that choose the
 * steps (see STEP): <prefix>_ONLY runs only the steps whose call holds its
 * text, <prefix>_SKIP (words separated by commas) leaves out those whose
 * call holds one of its words.  barrier: every rank waits for all after
 * each step.
 */
int harness_start(int argc, char** argv, const char* name, const char* np_list, const char* env_prefix, int barrier);

/** Whether the step whose call reads text is selected. */
int harness_selected(const char* text);

/** Whether the peers in other processes are reached over UCX
 * (MPINCCL_TRANSPORT=ucx or NCCL_P2P_DISABLE=1). */
int harness_over_ucx(void);

/** After a group on the capturing stream that ncclGroupEnd refused with res
 *  because it needed a graph slot the same capture holds: checks the
 *  refusal and its text, ends and drops the capture, checks that c was
 *  failed (ncclCommGetAsyncError), and meets the other ranks. */
void harness_same_capture_refused(ncclComm_t c, ncclResult_t res);

/** Rank 0 with two GPUs or more: ranks of this process on every GPU, two
 *  per GPU up to max (devs[i] = i % GPUs), made by ncclCommInitAll; their
 *  number, or 0 (said on rank 0 when the machine has one GPU). */
int harness_init_all_devices(const char* what, ncclComm_t* comms, int* devs, int max);

/** n ranks of this process on the current GPU (ncclCommInitAll, n <= 8);
 *  the result is checked (EXPECT). */
void harness_init_all_here(ncclComm_t* comms, int n);

/** Holds stream handle h back 50 ms on the GPU first (others 0) or on
 *  every other GPU (others 1): a kernel that waits (pattern.h, gpu_busy). */
void harness_hold_devices(int first, int others, cudaStream_t h);

/** The index of the k-th check of n ranks over devs, k < n: the ranks of
 *  GPUs other than devs[0] first, or those of devs[0] first (first_first).
 *  A check synchronizes its GPU's stream, so the GPU checked first is the
 *  one whose early reads are caught. */
int harness_device_order(const int* devs, int n, int k, int first_first);

/** After a step: the barrier if asked for, and a line on rank 0. */
void harness_step_done(const char* text);

/** Destroys comm, sums the failures over the ranks and says so; the exit code. */
int harness_finish(void);

/* Runs call unless the environment leaves it out (harness_start). */
#define STEP(call) \
  do { \
    if (!harness_selected(#call)) break; \
    call; \
    harness_step_done(#call); \
  } while (0)

#endif /* MPN_TESTS_HARNESS_H_ */
