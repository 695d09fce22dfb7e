/*
 * lanes.h - streams of the library's own beside a caller's stream, so that a
 * launch's large copy-engine copies to and from other GPUs run at once, each
 * on an engine of its own, instead of one after another on the caller's
 * stream: between ranks of one process both directions of an exchange then
 * overlap (examples/ring on two H200s: twice as fast).  Between processes
 * the engines serve one process's copies to and from one peer's IPC memory
 * one at a time all the same (bench/ipc_copies.cu).  A fork starts where
 * the copies may start and is joined back before anything that follows
 * them on the caller's stream.
 */
#ifndef MPN_CUDA_LANES_H_
#define MPN_CUDA_LANES_H_

#include <cuda_runtime.h>

#include "nccl.h"

/** Lanes per caller's stream: with the stream itself, copies that run at once. */
#define MPN_LANES 3
/** Callers' streams a lane table keeps lanes for (the least recently used go). */
#define MPN_LANE_SETS 4

typedef struct {
  unsigned long long owner; /* the caller's stream (mpn_cuda_stream_id; CUDA may number one 0) */
  int made;                 /* the lanes exist and serve owner; 0: unused */
  unsigned long long used;  /* when last forked from, for eviction */
  cudaStream_t lane[MPN_LANES];
} mpn_lane_set_t;

/** One communicator's lanes; used by one thread at a time, as the communicator is. */
typedef struct {
  mpn_lane_set_t set[MPN_LANE_SETS];
  unsigned long long clock;
} mpn_lanes_t;

/** A fork from one caller's stream: the copies of one launch's step. */
typedef struct {
  cudaStream_t origin;
  int dev;
  mpn_lanes_t* lanes; /* NULL: no fork (every copy on origin) */
  mpn_lane_set_t* set;
  cudaEvent_t start; /* recorded on origin where the copies may start */
  int copies;        /* copies placed so far */
  int forked;        /* lanes that waited for start */
  int stopped;       /* a step of the fork failed: the rest on origin */
} mpn_fork_t;

/** A fork of origin (device dev, current) that may use lanes (NULL: none). */
void mpn_fork_init(mpn_fork_t* f, cudaStream_t origin, int dev, mpn_lanes_t* lanes);

/**
 * The stream for the next copy of the fork: the first goes on origin (after
 * an event that marks where they may all start), the others round robin on
 * the lanes, each lane waiting for that event first.  Without lanes, or when
 * a lane cannot be made, origin; after a failure (returned once) origin too,
 * and the join joins only the lanes forked before it.
 */
ncclResult_t mpn_fork_next(mpn_fork_t* f, cudaStream_t* out);

/** Makes origin wait for every lane the fork used. */
ncclResult_t mpn_fork_join(mpn_fork_t* f);

/** Destroys the lanes (work already on them still runs). */
void mpn_lanes_destroy(mpn_lanes_t* l);

#endif /* MPN_CUDA_LANES_H_ */
