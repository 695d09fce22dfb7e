/*
 * param.h - the one table of run-time parameters: MPINCCL_* variables and the
 * NCCL_* names users already type.  Read and checked once per process.
 */
#ifndef MPN_CORE_PARAM_H_
#define MPN_CORE_PARAM_H_

#include <stdint.h>
#include <stdio.h>

#include "nccl.h"

typedef enum {
  MPN_PARAM_TRANSPORT,         /* auto | ipc | ucx */
  MPN_PARAM_P2P_DISABLE,       /* NCCL_P2P_DISABLE: 1 forces the network path */
  MPN_PARAM_BOOTSTRAP,         /* auto | mpi | local */
  MPN_PARAM_BOOTSTRAP_TIMEOUT, /* seconds */
  MPN_PARAM_BOOTSTRAP_LINGER,  /* seconds a failed rendezvous answers late callers */
  MPN_PARAM_BOOTSTRAP_TAG,     /* MPI tag of rendezvous messages */
  MPN_PARAM_WATCHDOG,          /* ms between checks that same-host peers live */
  MPN_PARAM_ABORT_DRAIN,       /* ms an abort releases flags again until the device is idle */
  MPN_PARAM_CHECK_BUFFERS,     /* each message's buffer looked up: reach and extent */
  MPN_PARAM_COPY_KERNEL_MAX,   /* messages up to this size move in one kernel */
  MPN_PARAM_KERNEL_SYNC,       /* flags and copies up to this size in one polling kernel */
  MPN_PARAM_KERNEL_SYNC_WAITS, /* fewest waits for which that kernel is used */
  MPN_PARAM_KERNEL_SYNC_EARLY, /* one-block flag kernels launched while the kernel before runs */
  MPN_PARAM_EAGER_MAX,         /* messages up to this size go through the peer's inbox */
  MPN_PARAM_EAGER_BIG_MAX,     /* larger ones up to this size through its big slots */
  MPN_PARAM_EAGER_GRAPH,       /* launches of this many captured small messages: each through its graph slot's inbox */
  MPN_PARAM_DELEGATE_WAIT,     /* host wait for a peer's post to copy both directions */
  MPN_PARAM_PUSH_MIN,          /* different GPUs: sends from this size move by their own side */
  MPN_PARAM_PUSH_WAIT,         /* host wait for the peer's receive so that they do */
  MPN_PARAM_SLICED_INBOX_WAIT, /* time-sliced GPU: inbox for multi-peer launches, host wait for a slot */
  MPN_PARAM_SLICED_GAP,        /* time-sliced GPU: GPU work between launches that makes one-peer launches use it */
  MPN_PARAM_LOCAL_WAIT,        /* host wait for a same-process peer's "done" event */
  MPN_PARAM_RMA_SELF_ELIDE,    /* signals of a rank to itself that stream order implies are not written */
  MPN_PARAM_AHEAD_TIMEOUT,     /* seconds a rank waits for a peer 512 messages behind on the host */
  MPN_PARAM_IPC_CLOSE_WAIT,    /* seconds an open waits for the closes of imports in its way */
  MPN_PARAM_NET_TIMEOUT,       /* seconds before an unreachable UCX peer fails */
  MPN_PARAM_FINALIZE_TIMEOUT,  /* seconds finalize and destroy wait for the comm's operations; 0: no bound */
  MPN_PARAM_UCX_CHUNK,         /* bytes of one staged chunk over UCX */
  MPN_PARAM_UCX_DEPTH,         /* staged chunks in flight per peer and direction */
  MPN_PARAM_UCX_DIRECT,        /* buffers UCX can reach go unstaged */
  MPN_PARAM_UCX_CHUNKS,        /* most chunks per staged message */
  MPN_PARAM_FLAGS,             /* host | device: where pair flags live */
  MPN_PARAM_NUM_RMA_CTX,       /* NCCL_NUM_RMA_CTX: overrides config->numRmaCtx */
  MPN_PARAM_DEBUG,             /* NCCL_DEBUG */
  MPN_PARAM_DEBUG_SUBSYS,      /* NCCL_DEBUG_SUBSYS */
  MPN_PARAM_DEBUG_FILE,        /* NCCL_DEBUG_FILE */
  MPN_PARAM_COUNT
} mpn_param_id_t;

typedef enum { MPN_PARAM_INT, MPN_PARAM_STRING, MPN_PARAM_CHOICE } mpn_param_type_t;

/** One row of the table. */
typedef struct {
  const char* name;     /**< environment variable */
  mpn_param_type_t type;
  const char* deflt;    /**< default, as text */
  const char* choices;  /**< MPN_PARAM_CHOICE: "a|b|c" */
  int64_t min, max;     /**< MPN_PARAM_INT bounds */
  const char* help;
} mpn_param_desc_t;

/** The table itself, MPN_PARAM_COUNT rows. */
extern const mpn_param_desc_t mpn_param_table[MPN_PARAM_COUNT];

/**
 * Reads every parameter from the environment and checks it.  Idempotent; a
 * bad value returns ncclInvalidArgument with a message naming the variable
 * (every later call returns the same).
 */
ncclResult_t mpn_params_load(void);

/** Re-reads the environment (tests only). */
ncclResult_t mpn_params_reload(void);

/** Value of an integer parameter (after mpn_params_load). */
int64_t mpn_param_int(mpn_param_id_t id);

/** Value of a string or choice parameter; never NULL. */
const char* mpn_param_str(mpn_param_id_t id);

/** Whether the variable was set by the user. */
int mpn_param_is_set(mpn_param_id_t id);

/** Logs every parameter with its effective value at INFO. */
void mpn_params_log(void);

/** Writes the table as Markdown (for the README; used by tests). */
void mpn_params_print_markdown(FILE* out);

#endif /* MPN_CORE_PARAM_H_ */
