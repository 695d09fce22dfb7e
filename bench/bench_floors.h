/*
 * bench_floors.h - what the hardware allows, measured with plain CUDA and MPI
 * (no mpinccl, no NCCL) at the start of a benchmark run: the copy rate of one
 * stream, and the latency of two kinds of exchange between ranks 0 and 1.
 * The benchmark reports its figures as ratios to these floors.
 */
#ifndef BENCH_FLOORS_H_
#define BENCH_FLOORS_H_

#include <mpi.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Floors of one run; every rank gets rank 0's values. */
typedef struct {
  double copy_gbps;    /**< one cudaMemcpyAsync device to device, best of copy_reps, rank 0 */
  size_t copy_bytes;   /**< size of that copy */
  int copy_reps;       /**< timed copies (after one untimed) */
  int exchange_iters;  /**< exchanges per timed loop of the two latency floors */
  double flag_us;      /**< flag-only exchange, us per exchange; < 0: not measured */
  double delegated_us; /**< delegated 8-byte exchange, us per exchange; < 0: not measured */
  double engine_us;    /**< engine exchange (both copy 8 bytes), us per exchange; < 0: not measured */
  char na_reason[160]; /**< why the exchange floors were not measured ("" when they were) */
  double barrier_us;   /**< flag-only barrier of every rank, us per barrier; < 0: not measured */
  double barrier_batch_us; /**< the same in one batch of memory operations per barrier; < 0: not measured */
  double barrier_comm_us;  /**< barrier_batch_us measured again once the library's communicator exists
                                (its threads, streams and memory present); < 0: not measured */
  int barrier_ranks;   /**< ranks in that barrier */
} bench_floors_t;

/**
 * Measures the floors; collective over comm, called with each rank's device
 * current and no other GPU work of this process in flight.
 *
 * Copy rate: rank 0 alone times single cudaMemcpyAsync calls of copy_bytes
 * (halved until both buffers fit) between two cudaMalloc buffers on one
 * stream, with events, and keeps the best.  Bytes copied per second, each
 * byte counted once.
 *
 * Exchanges, between ranks 0 and 1 only (the others wait), when pair_ok
 * (two or more ranks, ranks 0 and 1 on one host) and CUDA IPC works between
 * them.  Each rank's 4 KiB cudaMalloc region (a 64-bit flag, 8 bytes to
 * send, 8 bytes to receive) is mapped by the other (cudaIpcGetMemHandle /
 * cudaIpcOpenMemHandle, handles sent over MPI); stream memory operations come
 * from cudaGetDriverEntryPointByVersion, so nothing links libcuda.
 *  - flag-only: both ranks, exchange i: cuStreamWriteValue64(peer's flag, i),
 *    cuStreamWaitValue64(own flag, GEQ i).  Both sides run at once, so one
 *    exchange costs one one-way flag latency.
 *  - delegated: rank 1 writes rank 0's flag and waits for its own; rank 0
 *    waits for its flag, runs one one-thread kernel that copies 8 bytes in
 *    each direction (its send area into rank 1's receive area and back), and
 *    writes rank 1's flag.  Only rank 0 uses an engine (DESIGN.md).
 *  - engine: both ranks run a one-thread kernel that copies 8 bytes into the
 *    peer's receive area, write the peer's flag and wait for their own: both
 *    processes need an engine in every exchange (exchange_iters / 5 of them).
 * Both are timed with events on each rank's stream around exchange_iters
 * exchanges, after an untimed loop; the figure is the slower rank's time
 * divided by exchange_iters, best of three loops.
 *
 * Every CUDA failure outside the IPC set-up ends the job (MPI_Abort).
 */
void bench_floors_measure(MPI_Comm comm, size_t copy_bytes, int pair_ok, bench_floors_t* out);

/**
 * The flag-only barrier of every rank of comm (all on one host, CUDA IPC
 * between them; else barrier_us stays < 0): each rank's cudaMalloc region
 * holds one 64-bit flag per rank and is mapped by every other rank; barrier
 * i is, on each rank, cuStreamWriteValue64(rank r's flag [me], i) for every
 * rank r (itself included), then cuStreamWaitValue64(own flag [r], GEQ i)
 * for every r.  Timed like the exchanges (the slowest rank's time per
 * barrier, best of three loops after an untimed one).  barrier_batch_us is
 * the same barrier issued as one cuStreamBatchMemOp of those writes and
 * waits: one stream item per rank and barrier, the fewest a barrier of
 * stream memory operations can have (< 0 from 128 ranks on, which one
 * batch cannot hold).  Collective; the floor the signal
 * barrier cannot beat with memops alone.
 */
void bench_floors_barrier(MPI_Comm comm, bench_floors_t* out);

#ifdef __cplusplus
}
#endif

#endif /* BENCH_FLOORS_H_ */
