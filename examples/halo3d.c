/*
 * halo3d.c - mpinccl's main demo: a 3D 7-point Jacobi stencil, one block per
 * MPI rank, whose halo exchange goes through ncclSend/ncclRecv on a
 * communicator made from MPI_COMM_WORLD.  Times the iterations, then checks
 * the field against a one-block run of the same kernels on rank 0's GPU.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "halo3d_flags.h"
#include "halo3d_kernels.h"
#include "mpinccl.h"

#define NO_GPU_MESSAGE "halo3d: no CUDA GPU found on this machine; this demo needs one"

static int world_rank, world_size;

/* Every failure of CUDA or NCCL ends the whole job: an error seen by one rank
 * would leave its neighbours waiting for data that never comes.  MPI calls
 * are not checked: MPI_COMM_WORLD's default handler already aborts. */
#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    cudaError_t err_ = (call);                                               \
    if (err_ != cudaSuccess) {                                               \
      fprintf(stderr, "halo3d: rank %d: %s failed: %s\n", world_rank, #call, \
              cudaGetErrorString(err_));                                     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

#define NCCL_CHECK(comm, call)                                                               \
  do {                                                                                       \
    ncclResult_t res_ = (call);                                                              \
    if (res_ != ncclSuccess) {                                                               \
      fprintf(stderr, "halo3d: rank %d: %s failed: %s; last error: %s\n", world_rank, #call, \
              ncclGetErrorString(res_), ncclGetLastError(comm));                             \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    }                                                                                        \
  } while (0)

typedef struct {
  int n[3]; /* global grid, interior cells */
  int p[3]; /* process grid; 0 until MPI_Dims_create has chosen */
  int iters, warmup;
  int periodic, check, put;
  int ipc;  /* IPC_*: --ipc-exchange, --ipc-copy-out, --ipc-copy-out-engine */
  int sync; /* SYNC_*: an exchange, or a reference synchronization without data */
} options_t;

enum { SYNC_NONE, SYNC_FLAGS /* --flag-sync */, SYNC_HOST /* --host-sync */ };
enum {
  IPC_NONE,
  IPC_DIRECT /* --ipc-exchange */,
  IPC_COPY_OUT /* --ipc-copy-out */,
  IPC_COPY_OUT_ENGINE /* --ipc-copy-out-engine */
};

/* One rank's share of the grid. */
typedef struct {
  halo_box_t box;
  halo_place_t place;
  int nbr[HALO_FACES]; /* rank across each face, or MPINCCL_PROC_NULL */
} domain_t;

typedef enum {
  EXCHANGE_NCCL,      /* ncclSend/ncclRecv with the neighbours */
  EXCHANGE_PUT,       /* ncclPutSignal into the neighbours' ghost faces (--put) */
  EXCHANGE_FLAG_SYNC, /* no data: stream-ordered flags with the neighbours (halo3d_flags.h) */
  EXCHANGE_HOST_SYNC, /* no data: cudaStreamSynchronize + MPI_Barrier */
  EXCHANGE_IPC,       /* plain CUDA IPC copies and flags, no mpinccl (halo3d_flags.h) */
  EXCHANGE_LOCAL      /* one block, periodic wrap by device copies: the reference */
} exchange_t;

typedef struct {
  domain_t dom;
  unsigned faces;      /* faces with a neighbour: packed, exchanged, unpacked */
  double *u, *unew;    /* ghost layer included */
  double *send, *recv; /* the six faces back to back (halo_face_offset) */
  exchange_t exchange;
  ncclComm_t comm;
  cudaStream_t stream;
  ncclWindow_t win;                /* --put: recv, this rank's window (two sets of ghost faces) */
  size_t put_off[HALO_FACES];      /* --put, --ipc-*: where face f lands in nbr[f]'s ghost faces */
  size_t nbr_set[HALO_FACES];      /* --put: cells in one set of nbr[f]'s ghost faces */
  size_t set;                      /* --put: cells in one set of this rank's ghost faces */
  int phase;                       /* --put: the set of ghost faces this iteration fills */
  ncclWaitSignalDesc_t data[HALO_FACES]; /* --put: one per face with a neighbour */
  int ndesc;
  halo_flags_t* flags;             /* --flag-sync, --ipc-exchange, --ipc-copy-out */
  int ipc;                         /* IPC_*: with --ipc-copy-out(-engine), unpack from recv after a copy into it */
} solver_t;

/* ---------------------------------------------------------------- options -- */

static void usage(FILE* out) {
  fprintf(out,
          "usage: mpirun -np P halo3d [options]\n"
          "  -n N | NX,NY,NZ  global grid of interior cells (default 192,192,192)\n"
          "  -p PX,PY,PZ      process grid, PX*PY*PZ = P; a 0 is chosen by MPI_Dims_create\n"
          "                   (default 0,0,0)\n"
          "  -i ITERS         timed iterations (default 100)\n"
          "  -w ITERS         untimed warm-up iterations (default 10)\n"
          "  --periodic       periodic boundaries (default: fixed boundary values, and\n"
          "                   MPINCCL_PROC_NULL as the neighbour beyond the edge)\n"
          "  --no-check       skip the comparison with a one-block reference run\n"
          "  --flag-sync      no exchange: flag-only synchronization with the neighbours\n"
          "                   instead (each writes a flag of every neighbour and waits\n"
          "                   for its own, stream memory operations on each rank's\n"
          "                   stream): the cost of synchronizing without data\n"
          "  --host-sync      no exchange: cudaStreamSynchronize + MPI_Barrier instead\n"
          "  --ipc-exchange   the exchange in plain CUDA, without mpinccl: faces copied\n"
          "                   into the neighbours' ghost faces through CUDA IPC (two\n"
          "                   buffers used in turn), then the flags of --flag-sync\n"
          "  --ipc-copy-out   as --ipc-exchange, then the received faces copied (one\n"
          "                   kernel) into the rank's own receive buffer and unpacked\n"
          "                   from there: what a receive into the caller's buffer with\n"
          "                   one hop costs\n"
          "  --ipc-copy-out-engine  as --ipc-copy-out, the copy by the copy engine (one\n"
          "                   cudaMemcpyAsync per face) instead of a kernel\n"
          "  --put            exchange one-sided: ncclPutSignal of each face into the\n"
          "                   neighbour's ghost faces (a registered window holding two\n"
          "                   sets, used in turn), then ncclWaitSignal\n"
          "  -h, --help       this text\n");
}

static int parse_int(const char* s, char** end, int* out) {
  errno = 0;
  long v = strtol(s, end, 10);
  if (*end == s || errno != 0 || v < INT_MIN || v > INT_MAX) return -1;
  *out = (int)v;
  return 0;
}

/* "A,B,C", or "A" for A,A,A where single is allowed. */
static int parse_triple(const char* arg, int out[3], int single) {
  const char* s = arg;
  for (int d = 0; d < 3; d++) {
    char* end;
    if (parse_int(s, &end, &out[d]) != 0) return -1;
    if (d == 0 && single && *end == '\0') {
      out[1] = out[2] = out[0];
      return 0;
    }
    if (*end != (d < 2 ? ',' : '\0')) return -1;
    s = end + 1;
  }
  return 0;
}

static int parse_count(const char* arg, int* out) {
  char* end;
  return parse_int(arg, &end, out) != 0 || *end != '\0' ? -1 : 0;
}

/* Returns 0 to run, -1 after --help, 1 on a bad option (said on rank 0).
 * Every rank parses the same argv, so all reach the same answer. */
static int options_parse(int argc, char** argv, options_t* o) {
  static const struct option longopts[] = {{"periodic", no_argument, NULL, 'P'},
                                           {"no-check", no_argument, NULL, 'C'},
                                           {"flag-sync", no_argument, NULL, 'F'},
                                           {"host-sync", no_argument, NULL, 'H'},
                                           {"ipc-exchange", no_argument, NULL, 'I'},
                                           {"ipc-copy-out", no_argument, NULL, 'O'},
                                           {"ipc-copy-out-engine", no_argument, NULL, 'E'},
                                           {"put", no_argument, NULL, 'U'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  *o = (options_t){.n = {192, 192, 192}, .iters = 100, .warmup = 10, .check = 1};
  opterr = 0; /* getopt would complain once per rank */
  int c, bad = 0;
  while (!bad && (c = getopt_long(argc, argv, "n:p:i:w:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'n': bad = parse_triple(optarg, o->n, 1); break;
      case 'p': bad = parse_triple(optarg, o->p, 0); break;
      case 'i': bad = parse_count(optarg, &o->iters); break;
      case 'w': bad = parse_count(optarg, &o->warmup); break;
      case 'P': o->periodic = 1; break;
      case 'C': o->check = 0; break;
      case 'F': o->sync = SYNC_FLAGS; break;
      case 'H': o->sync = SYNC_HOST; break;
      case 'I': o->ipc = IPC_DIRECT; break;
      case 'O': o->ipc = IPC_COPY_OUT; break;
      case 'E': o->ipc = IPC_COPY_OUT_ENGINE; break;
      case 'U': o->put = 1; break;
      case 'h':
        if (world_rank == 0) usage(stdout);
        return -1;
      default: bad = 1; break;
    }
  }
  for (int d = 0; d < 3; d++) bad |= o->n[d] < 1 || o->p[d] < 0;
  bad |= optind < argc || o->iters < 1 || o->warmup < 0;
  if (bad && world_rank == 0) {
    fprintf(stderr, "halo3d: bad option or value near '%s'\n",
            optind - 1 < argc ? argv[optind - 1] : "");
    usage(stderr);
  }
  return bad ? 1 : 0;
}

/* Completes the process grid and checks that every rank gets at least one
 * cell and that the check's MPI_Gatherv counts (ints) can hold the grid. */
static int options_finish(options_t* o) {
  long fixed = 1; /* long: three factors of up to world_size each */
  int free_dims = 0;
  for (int d = 0; d < 3; d++) {
    fixed *= o->p[d] > 0 && o->p[d] <= world_size ? o->p[d] : 1;
    free_dims += o->p[d] == 0;
  }
  if (o->sync) o->check = 0; /* no data moves: there is nothing to check */
  const char* err = NULL;
  if (o->p[0] > world_size || o->p[1] > world_size || o->p[2] > world_size)
    err = "more processes along a dimension than ranks";
  else if (world_size % fixed != 0)
    err = "the process grid does not divide the number of ranks";
  else if (free_dims > 0)
    MPI_Dims_create(world_size, 3, o->p);
  double cells = (double)o->n[0] * o->n[1] * o->n[2];
  if (!err && o->p[0] * o->p[1] * o->p[2] != world_size)
    err = "PX*PY*PZ differs from the number of ranks";
  else if (!err && (o->n[0] < o->p[0] || o->n[1] < o->p[1] || o->n[2] < o->p[2]))
    err = "fewer cells than ranks along a dimension";
  else if (!err && cells > 1e12)
    err = "grid too large";
  else if (!err && o->check && cells > INT_MAX)
    err = "grid too large for the check's MPI_Gatherv (int counts); use --no-check";
  if (err && world_rank == 0)
    fprintf(stderr, "halo3d: %s (grid %d,%d,%d, process grid %d,%d,%d, %d ranks)\n", err, o->n[0],
            o->n[1], o->n[2], o->p[0], o->p[1], o->p[2], world_size);
  return err ? 1 : 0;
}

/* ----------------------------------------------------------- decomposition -- */

/* Cells [off, off + len) of n along one dimension for coordinate c of p:
 * the first n % p coordinates get one cell more. */
static void block_range(int n, int p, int c, int* len, int* off) {
  int base = n / p, extra = n % p;
  *len = base + (c < extra);
  *off = c * base + (c < extra ? c : extra);
}

/* Ranks are numbered x fastest.  A neighbour beyond a non-periodic edge is
 * MPINCCL_PROC_NULL; with periodic edges and one rank along a dimension, the
 * neighbour on both sides is the rank itself. */
static domain_t domain_of(const options_t* o, int rank) {
  int c[3] = {rank % o->p[0], rank / o->p[0] % o->p[1], rank / (o->p[0] * o->p[1])};
  domain_t dom;
  for (int d = 0; d < 3; d++) {
    block_range(o->n[d], o->p[d], c[d], &dom.box.n[d], &dom.place.off[d]);
    dom.place.global[d] = o->n[d];
  }
  for (int f = 0; f < HALO_FACES; f++) {
    int d = f / 2, nc[3] = {c[0], c[1], c[2]};
    nc[d] += (f & 1) ? 1 : -1;
    if (!o->periodic && (nc[d] < 0 || nc[d] >= o->p[d])) {
      dom.nbr[f] = MPINCCL_PROC_NULL;
      continue;
    }
    nc[d] = (nc[d] + o->p[d]) % o->p[d];
    dom.nbr[f] = nc[0] + o->p[0] * (nc[1] + o->p[1] * nc[2]);
  }
  return dom;
}

static size_t interior_cells(halo_box_t b) { return (size_t)b.n[0] * b.n[1] * b.n[2]; }

/* ------------------------------------------------------------------ solver -- */

/* Both fields get the initial values and, in their ghost layers, the fixed
 * boundary values: the sweep writes only interior cells, so ghosts beyond a
 * global edge keep them for the whole run. */
static void solver_create(solver_t* s, domain_t dom, exchange_t exchange, ncclComm_t comm,
                          cudaStream_t stream) {
  *s = (solver_t){.dom = dom, .exchange = exchange, .comm = comm, .stream = stream};
  for (int f = 0; f < HALO_FACES; f++)
    if (dom.nbr[f] != MPINCCL_PROC_NULL) s->faces |= 1u << f;
  size_t cells = halo_cells(dom.box), face_cells = halo_face_offset(dom.box, HALO_FACES);
  CUDA_CHECK(cudaMalloc((void**)&s->u, cells * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void**)&s->unew, cells * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void**)&s->send, face_cells * sizeof(double)));
  size_t recv_cells = face_cells;
  if (exchange == EXCHANGE_PUT) { /* two sets of ghost faces, used in turn, are this rank's window */
    s->set = face_cells;
    recv_cells = 2 * face_cells;
    NCCL_CHECK(comm, ncclMemAlloc((void**)&s->recv, recv_cells * sizeof(double)));
  } else {
    CUDA_CHECK(cudaMalloc((void**)&s->recv, recv_cells * sizeof(double)));
  }
  /* Deterministic ghosts in --flag-sync and --host-sync modes, where nothing arrives. */
  CUDA_CHECK(cudaMemsetAsync(s->recv, 0, recv_cells * sizeof(double), stream));
  CUDA_CHECK(halo_init(s->u, dom.box, dom.place, stream));
  CUDA_CHECK(halo_init(s->unew, dom.box, dom.place, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  /* Registered only once its clear is done: registration is collective, so
   * no neighbour's first put can come before it (docs/RMA.md, known problem 1). */
  if (exchange == EXCHANGE_PUT)
    NCCL_CHECK(comm, ncclCommWindowRegister(comm, s->recv, recv_cells * sizeof(double), &s->win, NCCL_WIN_DEFAULT));
}

static void solver_destroy(solver_t* s) {
  CUDA_CHECK(cudaStreamSynchronize(s->stream));
  halo_flags_close(s->flags);
  CUDA_CHECK(cudaFree(s->u));
  CUDA_CHECK(cudaFree(s->unew));
  CUDA_CHECK(cudaFree(s->send));
  if (s->exchange == EXCHANGE_PUT) {
    NCCL_CHECK(s->comm, ncclCommWindowDeregister(s->comm, s->win));
    NCCL_CHECK(s->comm, ncclMemFree(s->recv));
  } else {
    CUDA_CHECK(cudaFree(s->recv));
  }
}

/*
 * --put: face f goes into the ghost plane of nbr[f] that faces this rank,
 * its opposite(f) plane (see exchange_nccl), whose offset depends on the
 * neighbour's box, in the neighbour's set of ghost faces for this iteration.
 * Every rank signals once per face it puts and waits for one signal per ghost
 * plane it expects, then unpacks from that set.
 *
 * Two sets, used in turn, make this one hop with no acknowledgement: a put
 * into set p at iteration n overwrites what the neighbour unpacked at n - 2.
 * The neighbour's stream unpacked it before its puts of iteration n - 1, and
 * this rank's stream waited for those before it reaches iteration n.  That
 * holds because every neighbour relation goes both ways (B = nbr_A[f] exactly
 * when A = nbr_B[opposite(f)]); an exchange that is not symmetric needs a
 * signal back once the ghosts are used.
 */
static void neighbour_offsets(solver_t* s, const options_t* o) {
  for (int f = 0; f < HALO_FACES; f++) {
    if (!((s->faces >> f) & 1u)) continue;
    halo_box_t nb = domain_of(o, s->dom.nbr[f]).box;
    s->put_off[f] = halo_face_offset(nb, halo_opposite(f));
    s->nbr_set[f] = halo_face_offset(nb, HALO_FACES);
  }
}

static void put_setup(solver_t* s, const options_t* o) {
  neighbour_offsets(s, o);
  for (int f = 0; f < HALO_FACES; f++)
    if ((s->faces >> f) & 1u) s->data[s->ndesc++] = (ncclWaitSignalDesc_t){1, s->dom.nbr[f], 0, 0};
}

static void exchange_put(solver_t* s) {
  halo_box_t b = s->dom.box;
  if (s->ndesc == 0) return;
  NCCL_CHECK(s->comm, ncclGroupStart());
  for (int f = 0; f < HALO_FACES; f++)
    if ((s->faces >> f) & 1u)
      NCCL_CHECK(
          s->comm,
          ncclPutSignal(s->send + halo_face_offset(b, f), halo_face_count(b, f), ncclDouble, s->dom.nbr[f], s->win,
                        (s->phase * s->nbr_set[f] + s->put_off[f]) * sizeof(double), 0, 0, 0, s->comm, s->stream));
  NCCL_CHECK(s->comm, ncclWaitSignal(s->ndesc, s->data, s->comm, s->stream));
  NCCL_CHECK(s->comm, ncclGroupEnd());
}

/* NCCL pairs the k-th send from A to B with the k-th receive on B from A,
 * whatever buffers they name.  Step f sends face f to nbr[f] and receives the
 * ghost plane on the opposite side from nbr[opposite(f)].  In a Cartesian
 * grid B = nbr_A[f] exactly when A = nbr_B[opposite(f)], so B receives from A
 * at the same steps f, in the same order, as A sends to B, and each face lands
 * in the ghost plane facing it (A's +x face in B's -x ghosts).  That holds
 * when both x neighbours are one rank (px = 2, periodic) and when the rank is
 * its own neighbour (px = 1, periodic); posting send(f) with recv(f) instead
 * would put A's -x face into B's -x ghosts when px = 2.  The buffers are
 * reused next iteration safely: pack and unpack are stream-ordered after it. */
static void exchange_nccl(solver_t* s) {
  halo_box_t b = s->dom.box;
  NCCL_CHECK(s->comm, ncclGroupStart());
  for (int f = 0; f < HALO_FACES; f++) {
    int g = halo_opposite(f);
    NCCL_CHECK(s->comm, ncclSend(s->send + halo_face_offset(b, f), halo_face_count(b, f),
                                 ncclDouble, s->dom.nbr[f], s->comm, s->stream));
    NCCL_CHECK(s->comm, ncclRecv(s->recv + halo_face_offset(b, g), halo_face_count(b, g),
                                 ncclDouble, s->dom.nbr[g], s->comm, s->stream));
  }
  NCCL_CHECK(s->comm, ncclGroupEnd());
}

/* The reference's periodic wrap: what the rank itself would receive. */
static void exchange_local(solver_t* s) {
  halo_box_t b = s->dom.box;
  for (int f = 0; f < HALO_FACES; f++) {
    if (!((s->faces >> f) & 1u)) continue;
    int g = halo_opposite(f);
    CUDA_CHECK(cudaMemcpyAsync(s->recv + halo_face_offset(b, g), s->send + halo_face_offset(b, f),
                               halo_face_count(b, f) * sizeof(double), cudaMemcpyDeviceToDevice,
                               s->stream));
  }
}

/* --host-sync: every rank waits for its own packing and then for all others,
 * as an exchange would wait for its neighbours, but nothing moves and the
 * host takes part.  The barrier is global, not between neighbours only. */
static void exchange_host_sync(solver_t* s) {
  CUDA_CHECK(cudaStreamSynchronize(s->stream));
  MPI_Barrier(MPI_COMM_WORLD);
}

/* --ipc-exchange and --ipc-copy-out: what plain CUDA pays for the exchange
 * (halo3d_flags.h); the copy into the receive buffer comes in solver_step. */
static void exchange_ipc(solver_t* s) {
  halo_face_copy_t copy[HALO_FACES];
  for (int f = 0; f < HALO_FACES; f++)
    copy[f] = (halo_face_copy_t){s->send + halo_face_offset(s->dom.box, f),
                                 halo_face_count(s->dom.box, f) * sizeof(double), s->put_off[f] * sizeof(double)};
  CUDA_CHECK(halo_flags_sync(s->flags, copy, s->stream));
}

/* --ipc-copy-out-engine: the received faces into the receive buffer, one
 * copy-engine copy per face. */
static void copy_faces_by_engine(solver_t* s, const double* ghosts) {
  halo_box_t b = s->dom.box;
  for (int f = 0; f < HALO_FACES; f++)
    if ((s->faces >> f) & 1u)
      CUDA_CHECK(cudaMemcpyAsync(s->recv + halo_face_offset(b, f), ghosts + halo_face_offset(b, f),
                                 halo_face_count(b, f) * sizeof(double), cudaMemcpyDeviceToDevice, s->stream));
}

/* One iteration; without the sweep, only the communication part of it. */
static void solver_step(solver_t* s, int sweep) {
  CUDA_CHECK(halo_pack(s->u, s->send, s->dom.box, s->faces, s->stream));
  switch (s->exchange) {
    case EXCHANGE_NCCL: exchange_nccl(s); break;
    case EXCHANGE_PUT: exchange_put(s); break;
    case EXCHANGE_FLAG_SYNC: CUDA_CHECK(halo_flags_sync(s->flags, NULL, s->stream)); break;
    case EXCHANGE_IPC: exchange_ipc(s); break;
    case EXCHANGE_HOST_SYNC: exchange_host_sync(s); break;
    case EXCHANGE_LOCAL: exchange_local(s); break;
  }
  double* ghosts = s->recv;
  if (s->exchange == EXCHANGE_PUT) {
    ghosts = s->recv + s->phase * s->set;
    s->phase ^= 1;
  } else if (s->exchange == EXCHANGE_IPC) {
    ghosts = halo_flags_received(s->flags);
    if (s->ipc == IPC_COPY_OUT_ENGINE) {
      copy_faces_by_engine(s, ghosts);
      ghosts = s->recv;
    } else if (s->ipc == IPC_COPY_OUT) {
      CUDA_CHECK(halo_copy_faces(s->recv, ghosts, s->dom.box, s->faces, s->stream));
      ghosts = s->recv;
    }
  }
  CUDA_CHECK(halo_unpack(s->u, ghosts, s->dom.box, s->faces, s->stream));
  if (!sweep) return;
  CUDA_CHECK(halo_jacobi(s->u, s->unew, s->dom.box, s->stream));
  double* t = s->u;
  s->u = s->unew;
  s->unew = t;
}

/* Milliseconds for iters steps, from events on the stream: the loop itself
 * never waits for the GPU (except in --host-sync mode, by design).  *host_ms
 * (unless NULL) gets the host's time to enqueue them: when it comes near the GPU's, the
 * host sets the pace. */
static double solver_time(solver_t* s, int iters, int sweep, double* host_ms) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaStreamSynchronize(s->stream));
  MPI_Barrier(MPI_COMM_WORLD); /* start together: skew is not communication */
  CUDA_CHECK(cudaEventRecord(start, s->stream));
  double t0 = MPI_Wtime();
  for (int it = 0; it < iters; it++) solver_step(s, sweep);
  if (host_ms) *host_ms = (MPI_Wtime() - t0) * 1e3;
  CUDA_CHECK(cudaEventRecord(stop, s->stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms;
}

/* The interior of u, x fastest, copied to the host. */
static double* solver_interior(solver_t* s) {
  halo_box_t b = s->dom.box;
  double* full = malloc(halo_cells(b) * sizeof(double));
  double* out = malloc(interior_cells(b) * sizeof(double));
  if (full == NULL || out == NULL) {
    fprintf(stderr, "halo3d: rank %d: out of host memory\n", world_rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  CUDA_CHECK(cudaStreamSynchronize(s->stream));
  CUDA_CHECK(cudaMemcpy(full, s->u, halo_cells(b) * sizeof(double), cudaMemcpyDeviceToHost));
  size_t pos = 0;
  for (int k = 1; k <= b.n[2]; k++)
    for (int j = 1; j <= b.n[1]; j++)
      for (int i = 1; i <= b.n[0]; i++) out[pos++] = full[halo_index(b, i, j, k)];
  free(full);
  return out;
}

/* ----------------------------------------------------------------- check -- */

/* Every rank's interior, block after block in rank order, on rank 0. */
static double* gather_field(const options_t* o, solver_t* s) {
  double* mine = solver_interior(s);
  double* all = NULL;
  int *counts = NULL, *displs = NULL;
  if (world_rank == 0) {
    all = malloc((size_t)o->n[0] * o->n[1] * o->n[2] * sizeof(double));
    counts = malloc(world_size * sizeof(int));
    displs = malloc(world_size * sizeof(int));
    if (all == NULL || counts == NULL || displs == NULL) {
      fprintf(stderr, "halo3d: out of host memory for the check\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int at = 0; /* options_finish made sure the whole grid fits an int */
    for (int r = 0; r < world_size; r++) {
      counts[r] = (int)interior_cells(domain_of(o, r).box);
      displs[r] = at;
      at += counts[r];
    }
  }
  MPI_Gatherv(mine, (int)interior_cells(s->dom.box), MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0,
              MPI_COMM_WORLD);
  free(mine);
  free(counts);
  free(displs);
  return all;
}

/* The same number of iterations on the whole grid as one block: no
 * communication, the global edge as ghost (or the periodic wrap). */
static double* reference_field(const options_t* o, cudaStream_t stream) {
  options_t one = *o;
  one.p[0] = one.p[1] = one.p[2] = 1;
  solver_t ref;
  solver_create(&ref, domain_of(&one, 0), EXCHANGE_LOCAL, NULL, stream);
  for (int it = 0; it < o->warmup + o->iters; it++) solver_step(&ref, 1);
  double* out = solver_interior(&ref);
  solver_destroy(&ref);
  return out;
}

/* Compares the gathered blocks with the reference on rank 0; returns whether
 * they are bitwise equal (same operations in the same order, so nothing less
 * is expected), on every rank. */
static int check_field(const options_t* o, double* gathered, cudaStream_t stream) {
  int pass = 1;
  if (world_rank == 0) {
    double* ref = reference_field(o, stream);
    double max_diff = 0;
    size_t differ = 0, pos = 0;
    for (int r = 0; r < world_size; r++) {
      domain_t dom = domain_of(o, r);
      for (int k = 0; k < dom.box.n[2]; k++)
        for (int j = 0; j < dom.box.n[1]; j++)
          for (int i = 0; i < dom.box.n[0]; i++) {
            size_t at = (size_t)(dom.place.off[0] + i) +
                        (size_t)o->n[0] * ((size_t)(dom.place.off[1] + j) +
                                           (size_t)o->n[1] * (size_t)(dom.place.off[2] + k));
            double a = gathered[pos++], b = ref[at], diff = a > b ? a - b : b - a;
            differ += a != b; /* also counts NaNs, which no max catches */
            if (diff > max_diff) max_diff = diff;
          }
    }
    pass = differ == 0;
    if (pass)
      printf("check: max |diff| = %g (PASS)\n", max_diff);
    else
      printf("check: max |diff| = %g (FAIL: %zu cells differ)\n", max_diff, differ);
    free(ref);
  }
  MPI_Bcast(&pass, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return pass;
}

/* ------------------------------------------------------------------- main -- */

/* 1 when every rank sees a GPU; a failing cudaGetDeviceCount (no driver)
 * counts as none. */
static int gpus_everywhere(int* ndev) {
  if (cudaGetDeviceCount(ndev) != cudaSuccess) {
    (void)cudaGetLastError();
    *ndev = 0;
  }
  int mine = *ndev > 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all;
}

/* Ranks of a node share its GPUs round robin (several per GPU when there is
 * one).  Returns the number of GPUs in use over all nodes. */
static int device_select(int ndev) {
  MPI_Comm node;
  int local_rank, local_size;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  CUDA_CHECK(cudaSetDevice(local_rank % ndev));
  int mine = local_rank == 0 ? (local_size < ndev ? local_size : ndev) : 0, used = 0;
  MPI_Allreduce(&mine, &used, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return used;
}

static void print_header(const options_t* o, int gpus) {
  if (world_rank != 0) return;
  printf("halo3d: 3D 7-point Jacobi, halo exchange through mpinccl\n");
  printf("  grid        %d x %d x %d doubles (global), %s\n", o->n[0], o->n[1], o->n[2],
         o->periodic ? "periodic" : "fixed boundary values");
  printf("  processes   %d x %d x %d, %d ranks on %d GPU%s\n", o->p[0], o->p[1], o->p[2],
         world_size, gpus, gpus == 1 ? "" : "s");
  printf("  iterations  %d timed, after %d warm-up\n", o->iters, o->warmup);
  printf("  exchange    %s\n",
         o->sync == SYNC_FLAGS    ? "none (--flag-sync: flags with the neighbours, stream memory operations)"
         : o->sync == SYNC_HOST   ? "none (--host-sync: cudaStreamSynchronize + MPI_Barrier)"
         : o->put                 ? "ncclPutSignal into the neighbours' windows, ncclWaitSignal"
         : o->ipc == IPC_DIRECT   ? "plain CUDA IPC copies and stream memory operations (--ipc-exchange)"
         : o->ipc == IPC_COPY_OUT ? "plain CUDA IPC copies and memory operations, then a local copy (--ipc-copy-out)"
         : o->ipc                 ? "plain CUDA IPC copies and memory operations, then local copies by the copy engine "
                                    "(--ipc-copy-out-engine)"
                                  : "ncclSend/ncclRecv in one group");
  fflush(stdout);
}

/* Per-iteration times over the ranks.  The communication share comes from a
 * second loop that runs only pack, exchange and unpack, not from events
 * around the exchange in the main loop: those would need an event pair per
 * iteration and, with several ranks on one GPU, would also count the time
 * this rank's stream waits while the GPU runs other ranks' sweeps.  As all
 * work is on one stream, nothing overlaps the exchange, so the ratio of the
 * two loops is the share of an iteration spent communicating. */
static void print_times(const options_t* o, double full_ms, double comm_ms, double host_ms) {
  double mine[3] = {full_ms, comm_ms, host_ms}, sum[3], max[3];
  MPI_Reduce(mine, sum, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(mine, max, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (world_rank != 0) return;
  double per_iter = 1e3 / o->iters; /* ms per loop -> us per iteration */
  printf("time/iter  %.1f us (max %.1f us)  comm %.1f %%\n", sum[0] / world_size * per_iter,
         max[0] * per_iter, sum[0] > 0 ? 100 * sum[1] / sum[0] : 0.0);
  printf("comm/iter  %.1f us (max %.1f us)  pack + %s + unpack alone\n",
         sum[1] / world_size * per_iter, max[1] * per_iter,
         o->sync ? "synchronization" : "exchange");
  printf("host/iter  %.1f us (max %.1f us)  the host's time to enqueue an iteration%s\n",
         sum[2] / world_size * per_iter, max[2] * per_iter,
         o->sync == SYNC_HOST ? " (it waits for the GPU)" : "");
  fflush(stdout);
}

/* Warm-up, the timed loops, and the check; returns the exit code. */
static int run(const options_t* o, int gpus) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ncclComm_t comm = NULL;
  NCCL_CHECK(NULL, mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL));
  print_header(o, gpus);
  solver_t s;
  exchange_t ex = o->sync == SYNC_FLAGS ? EXCHANGE_FLAG_SYNC
                  : o->sync == SYNC_HOST ? EXCHANGE_HOST_SYNC
                  : o->put               ? EXCHANGE_PUT
                  : o->ipc               ? EXCHANGE_IPC
                                         : EXCHANGE_NCCL;
  solver_create(&s, domain_of(o, world_rank), ex, comm, stream);
  if (ex == EXCHANGE_PUT) put_setup(&s, o);
  s.ipc = o->ipc;
  if (ex == EXCHANGE_FLAG_SYNC || ex == EXCHANGE_IPC) {
    char why[160] = "";
    size_t ghosts = ex == EXCHANGE_IPC ? halo_face_offset(s.dom.box, HALO_FACES) * sizeof(double) : 0;
    neighbour_offsets(&s, o);
    s.flags = halo_flags_open(MPI_COMM_WORLD, s.dom.nbr, ghosts, why, sizeof(why));
    if (s.flags == NULL) {
      fprintf(stderr, "halo3d: rank %d: %s is not available: %s\n", world_rank,
              ex != EXCHANGE_IPC             ? "--flag-sync"
              : s.ipc == IPC_COPY_OUT_ENGINE ? "--ipc-copy-out-engine"
              : s.ipc == IPC_COPY_OUT        ? "--ipc-copy-out"
                                             : "--ipc-exchange",
              why);
      solver_destroy(&s);
      NCCL_CHECK(comm, ncclCommDestroy(comm));
      CUDA_CHECK(cudaStreamDestroy(stream));
      return 1;
    }
  }
  for (int it = 0; it < o->warmup; it++) solver_step(&s, 1);
  double host_ms = 0;
  double full_ms = solver_time(&s, o->iters, 1, &host_ms);
  /* Leaves the interior as it is: the ghosts it refreshes are those the next
   * step would write, so the check below sees warmup + iters sweeps. */
  double comm_ms = solver_time(&s, o->iters, 0, NULL);
  print_times(o, full_ms, comm_ms, host_ms);
  double* gathered = o->check ? gather_field(o, &s) : NULL;
  solver_destroy(&s);
  NCCL_CHECK(comm, ncclCommFinalize(comm));
  NCCL_CHECK(comm, ncclCommDestroy(comm));
  int pass = 1;
  if (o->check)
    pass = check_field(o, gathered, stream);
  else if (world_rank == 0)
    printf("check: skipped (%s)\n", o->sync ? "no halo data moves" : "--no-check");
  free(gathered);
  CUDA_CHECK(cudaStreamDestroy(stream));
  return pass ? 0 : 1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  options_t o;
  int rc = options_parse(argc, argv, &o);
  if (rc == 0) rc = options_finish(&o);
  int ndev = 0;
  if (rc == 0 && !gpus_everywhere(&ndev)) {
    if (world_rank == 0) fprintf(stderr, "%s\n", NO_GPU_MESSAGE);
    rc = 2;
  }
  if (rc == 0) rc = run(&o, device_select(ndev));
  MPI_Finalize();
  return rc < 0 ? 0 : rc;
}
