/*
 * topo.h - what each rank learns about the others at creation: host,
 * process, CUDA device (UUID, PCI bus, NUMA node), MPS, and which ranks share
 * a GPU.
 */
#ifndef MPN_CORE_TOPO_H_
#define MPN_CORE_TOPO_H_

#include <stdint.h>

#include "nccl.h"

struct ncclComm;

/** GPUs a rank lists as out of its GPU's reach (more are not listed). */
#define MPN_TOPO_APART 16

/** One rank's description, exchanged by allgather (fixed size). */
typedef struct {
  uint64_t host_hash; /**< host name, boot id and the /dev/shm it shares */
  uint64_t proc;      /**< process identity */
  uint64_t pidns;     /**< PID namespace (inode of /proc/self/ns/pid), 0: unknown */
  uint64_t start_time; /**< process start time (mpn_proc_start_time), 0: unknown */
  char host[64];
  int32_t pid;
  int32_t world;      /**< MPI_COMM_WORLD rank, -1 without MPI */
  int32_t cuda_dev;   /**< device ordinal in its process, -1: none */
  int32_t mps;        /**< 1: the device is shared through MPS */
  int32_t numa;       /**< NUMA node nearest the GPU, -1: unknown */
  int32_t cc;         /**< compute capability, major*10+minor */
  int32_t num_rma_ctx; /**< the communicator's numRmaCtx, which every rank must share */
  int32_t wait_nor;    /**< its GPU's streams can wait for bits clear (mpn_driver_wait_nor) */
  unsigned char uuid[16];
  char pci_bus[16];
  int32_t napart;                 /**< entries of apart */
  uint64_t apart[MPN_TOPO_APART]; /**< hashes of the PCI bus ids of other GPUs this process sees
                                       that this rank's GPU cannot map, or that cannot map it */
} mpn_rank_info_t;

typedef struct {
  mpn_rank_info_t* ranks; /**< nranks entries */
  int* gpu_leader;        /**< per rank: lowest rank on the same GPU, or itself */
  int* gpu_sliced;        /**< per rank: its GPU is shared with another process without MPS */
  int n_same_host;        /**< ranks on my host, me included */
  int n_same_process;     /**< ranks in my process, me included */
  int n_same_gpu;         /**< ranks on my GPU, me included (0 without a GPU) */
  int shared_gpu_no_mps;  /**< some GPU is shared by several processes without MPS */
} mpn_topo_t;

/** Describes the calling rank (host, process, device). */
ncclResult_t mpn_topo_describe_self(int device, mpn_rank_info_t* out);

/** Exchanges descriptions and derives the sharing relations. Collective. */
ncclResult_t mpn_topo_discover(struct ncclComm* comm);

/** True when ranks a and b use the same physical GPU. */
int mpn_topo_same_gpu(const mpn_topo_t* t, int a, int b);

/** What mpn_rank_info_t.apart holds for a GPU: a hash of its PCI bus id
 * (16 bytes, possibly unterminated). */
uint64_t mpn_topo_bus_hash(const char bus[16]);

/**
 * True when ranks a and b, on one host and each with a GPU, can use each
 * other's device memory directly (CUDA IPC, or plain pointers in one
 * process): the same GPU, or GPUs that neither rank lists as apart.  A
 * process that does not see the other's GPU (CUDA_VISIBLE_DEVICES) cannot
 * ask CUDA, so that counts as reachable, as NCCL's launchers expect; but
 * two MIG instances of one GPU (one PCI bus id, two UUIDs) never are.
 */
int mpn_topo_direct(const mpn_topo_t* t, int a, int b);

/**
 * True when a kernel of rank a may poll for what rank b writes: both have a
 * GPU, on one host, in different processes, and neither GPU is time-sliced
 * between processes of this communicator (MPS or one process per GPU), so
 * the kernels of both run at once.
 */
static inline int mpn_topo_kernels_concurrent(const mpn_topo_t* t, int a, int b) {
  return t->ranks[a].cuda_dev >= 0 && t->ranks[b].cuda_dev >= 0 && t->ranks[a].proc != t->ranks[b].proc &&
         t->ranks[a].host_hash == t->ranks[b].host_hash && !t->gpu_sliced[a] && !t->gpu_sliced[b];
}

/** True when ranks a and b are on the same host. */
static inline int mpn_topo_same_host(const mpn_topo_t* t, int a, int b) {
  return t->ranks[a].host_hash == t->ranks[b].host_hash;
}

/** Frees what mpn_topo_discover allocated. */
void mpn_topo_free(mpn_topo_t* t);

/** Logs ranks, GPUs and sharing at INFO. */
void mpn_topo_log(const struct ncclComm* comm);

/** NUMA node nearest a PCI device, from hwloc; -1 when unknown. */
int mpn_numa_node_of_pci(const char* bus_id);

/** Loads the host's topology now (once per process; later calls return at
 * once): hwloc reads the environment while it loads, and its components
 * may start GPU libraries that write it, which creation threads must not
 * do beside the application's threads (init.c). */
void mpn_numa_preload(void);

/** Binds the calling thread to the CPUs nearest a PCI device; 0 on success. */
int mpn_bind_thread_near_pci(const char* bus_id);

#endif /* MPN_CORE_TOPO_H_ */
