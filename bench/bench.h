/*
 * bench.h - the state of one mpinccl_bench run, shared by bench.c (options,
 * plans, timing) and bench_report.c (the printed header and table, the JSON
 * file).
 */
#ifndef BENCH_H_
#define BENCH_H_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef BENCH_WITH_NVIDIA_NCCL
#include <nccl.h>
#else
#include "mpinccl.h"
#endif

#include "bench_floors.h"
#include "bench_net.h"

#define HALO_DIRS 27 /* 3 x 3 x 3 offsets; index 13 is the rank itself */
#define HALO_SELF 13
#define HALO_CORNER_BYTES 8
#define MAX_SIZES 80

typedef enum {
  OP_SENDRECV,
  OP_ALLTOALL,
  OP_PINGPONG,
  OP_HALO,
  OP_PUT,          /* one-sided: rank 0 puts into rank 1's window */
  OP_PUTPINGPONG,  /* one-sided ping-pong, ranks 0 and 1 */
  OP_BARRIER,      /* signals only: every rank signals every rank, waits for all */
  OP_RMAALLTOALL,  /* one-sided all-to-all */
  OP_COUNT
} op_t;

/* The one-sided API: mpinccl, or NVIDIA's NCCL from 2.29 on. */
#if !defined(BENCH_WITH_NVIDIA_NCCL) || (defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22900)
#define BENCH_HAVE_RMA 1
#else
#define BENCH_HAVE_RMA 0
#endif

/* Whether op uses windows and signals. */
static inline int bench_op_rma(op_t op) { return op >= OP_PUT && op < OP_COUNT; }

typedef struct {
  op_t op;
  int op_set;
  size_t minbytes, maxbytes;
  long stepfactor;
  int iters, warmup, graph, check, reg, floors_only, net;
  const char* json;
} options_t;

/* One send and one receive of an iteration, posted together; a peer < 0 means
 * no send (or no receive).  Keys name the pattern (sender << 32 | tag). */
typedef struct {
  int send_peer, recv_peer;
  size_t send_off, recv_off, bytes;
  uint64_t send_key, recv_key;
} msg_t;

typedef struct {
  int gpus, ranks_per_gpu, mps, mps_mixed, pair_same_node;
  char gpu_name[256];
} topo_t;

typedef struct {
  size_t bytes, edge;
  double time_us, algbw, busbw, vs_copy, vs_floor, host_us, host_us_max, host_idle_us;
  long long wrong; /* -1: not checked */
} result_t;

typedef struct {
  const options_t* o;
  int rank, nranks; /* in MPI_COMM_WORLD */
  topo_t topo;
  bench_floors_t floors;
  bench_net_t net; /* --net: the UCX path's floors */
  double floor_us; /* the latency floor vs-floor divides by; < 0: n/a */
  const char* floor_name;
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t start, stop;
  char *sendbuf, *recvbuf; /* one-sided ops: recvbuf is this rank's window */
  size_t sendcap, recvcap;
  void* reg_handles[2];
#if BENCH_HAVE_RMA
  ncclWindow_t win;
  ncclWaitSignalDesc_t* all_peers; /* one signal from every rank */
#endif
  unsigned long long* wrong_dev;
  int dims[3], nbr[HALO_DIRS]; /* halo */
  msg_t* msgs;                 /* the plan of the current size */
  int nmsgs;
  size_t size, edge; /* reported size; halo edge bytes */
  double rank_bytes; /* bytes this rank sends per iteration */
  double host_s;     /* halo: seconds from ncclGroupStart to ncclGroupEnd's return */
  result_t results[MAX_SIZES];
  int nresults;
  char error[512]; /* why the run stopped early, for the JSON file */
} bench_t;

/**
 * Parses the command line into o (defaults first).  Returns 0 to run, -1
 * after --help (printed by rank 0), 1 on a bad option (rank 0 says which).
 */
int bench_options_parse(int argc, char** argv, int world_rank, int world_size, options_t* o);

/** Name of an operation as -o spells it. */
const char* bench_op_name(op_t op);

/** Whether op has one message in flight at a time (pingpong, putpingpong, put). */
int bench_op_one_way(op_t op);

/** Whether an operation is a ping-pong, whose time is reported one way (half a round trip). */
int bench_op_round_trip(op_t op);

/** The --net floor the run's bandwidth is compared with: the slowest stage,
 * with UCX measured one way or both ways at once as the operation moves data. */
double bench_net_floor_gbps(const bench_t* b);

/** Rank 0: the header (library, ranks, GPU, regime, floors, what the columns mean). */
void bench_report_header(const bench_t* b);

/** Rank 0: the column titles of the table. */
void bench_report_table_header(const bench_t* b);

/** Rank 0: one row of the table. */
void bench_report_row(const bench_t* b, const result_t* r);

/** Rank 0: everything, rows included, to the --json file, if one was given;
 *  1 (after saying why) where the file could not be written, else 0. */
int bench_report_json(const bench_t* b);

#endif /* BENCH_H_ */
