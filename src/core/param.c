/*
 * param.c - the parameter table and its reading: every variable is checked
 * once, so a typo in MPINCCL_TRANSPORT fails communicator creation with a
 * message instead of being ignored.
 */
#include "core/param.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/debug.h"
#include "core/error.h"

const mpn_param_desc_t mpn_param_table[MPN_PARAM_COUNT] = {
    [MPN_PARAM_TRANSPORT] = {"MPINCCL_TRANSPORT", MPN_PARAM_CHOICE, "auto", "auto|ipc|ucx", 0, 0,
                             "Transport between ranks of different processes: auto picks CUDA "
                             "IPC on the same host (host name, boot id and /dev/shm alike: "
                             "containers with a /dev/shm each are hosts apart) and UCX otherwise; "
                             "ucx forces the network path."},
    [MPN_PARAM_P2P_DISABLE] = {"NCCL_P2P_DISABLE", MPN_PARAM_INT, "0", NULL, 0, 1,
                               "1 forces the network (UCX) path between processes, as "
                               "MPINCCL_TRANSPORT=ucx does."},
    [MPN_PARAM_BOOTSTRAP] = {"MPINCCL_BOOTSTRAP", MPN_PARAM_CHOICE, "auto", "auto|mpi|local", 0, 0,
                             "Rendezvous of ncclGetUniqueId/ncclCommInitRank: mpi meets over "
                             "MPI_COMM_WORLD (initializing MPI if needed), local only within the "
                             "process, auto uses MPI when MPI is initialized or the process was "
                             "started by an MPI launcher."},
    [MPN_PARAM_BOOTSTRAP_TIMEOUT] = {"MPINCCL_BOOTSTRAP_TIMEOUT", MPN_PARAM_INT, "120", NULL, 1, 86400,
                                     "Seconds a rank waits for its peers during communicator "
                                     "creation before failing with ncclTimeout."},
    [MPN_PARAM_BOOTSTRAP_LINGER] = {"MPINCCL_BOOTSTRAP_LINGER", MPN_PARAM_INT, "2", NULL, 0, 86400,
                                    "Seconds a rendezvous that failed (callers of one unique id "
                                    "disagreeing on nranks, or giving one rank twice) goes on answering "
                                    "callers that come later with its error, counted from the last "
                                    "caller; the process that made the id serves them meanwhile (its "
                                    "own ncclCommInitRank returns once every rank a caller claimed was "
                                    "answered, this time passed, or the creation was aborted). A caller "
                                    "after that starts a new "
                                    "rendezvous on the id and waits for its peers."},
    [MPN_PARAM_BOOTSTRAP_TAG] = {"MPINCCL_BOOTSTRAP_TAG", MPN_PARAM_INT, "29743", NULL, 0, 32767,
                                 "MPI tag of the library's set-up messages on MPI_COMM_WORLD; "
                                 "change it if the application uses the same tag there."},
    [MPN_PARAM_WATCHDOG] =
        {"MPINCCL_WATCHDOG_MS", MPN_PARAM_INT, "200", NULL, 0, 60000,
         "Milliseconds between checks that the processes of peers on this "
         "host are alive, and that UCX has not found a peer over UCX "
         "unreachable; a peer found gone sets ncclRemoteError on the "
         "communicator and releases the streams waiting for it, again at "
         "every check (as for a peer that aborted its communicator: queued "
         "graph replays take one release each). The same "
         "thread takes in the news of destroyed CUDA graphs, whose graph "
         "slots then serve again. The checks stop when the process starts "
         "to exit (peers that exit first are not reported then). A peer that "
         "ended its communicator normally (ncclCommDestroy) before its process "
         "exited, having answered every message and signal this rank waits for "
         "through the pairs they share, is no failure: the communicator goes on, "
         "and later calls naming that peer are refused with ncclRemoteError, but for a "
         "wait for signals it sent and a receive of a message it left in this rank's inbox "
         "(calls made before and issued after, in a group still open then, that count on more "
         "than it answered fail as for a peer gone). A "
         "peer with which this rank shares nothing (over CUDA IPC no message ever, "
         "over UCX no operation not done and no one-sided call captured in a CUDA graph unless the peer announced "
         "a clean close; no signal awaited) "
         "is no failure either when its process exits, normally or "
         "not, since nothing of this rank's waits for it: later calls naming it "
         "are refused with ncclRemoteError. 0 disables."},
    [MPN_PARAM_ABORT_DRAIN] =
        {"MPINCCL_ABORT_DRAIN_MS", MPN_PARAM_INT, "10000", NULL, 0, 600000,
         "ncclCommAbort releases every stream flag the communicator shares with its peers, then "
         "again and again until the device has run the work queued on it (each queued replay of a "
         "CUDA graph takes one release, as a captured wait puts its flag back after it), at most "
         "this many milliseconds; then it frees the communicator, leaving the pairs' memory mapped "
         "if the device is still busy. 0: one release."},
    [MPN_PARAM_CHECK_BUFFERS] = {"MPINCCL_CHECK_BUFFERS", MPN_PARAM_INT, "1", NULL, 0, 1,
                                 "1: every send and receive looks its buffer up (one CUDA driver query) and refuses, "
                                 "with ncclInvalidArgument, one that runs past the end of its allocation or that the "
                                 "GPU cannot reach (pageable host memory), instead of copying past it or faulting; "
                                 "0: only buffers shared through CUDA IPC are checked (their export looks them up "
                                 "anyway), as NCCL checks none by default. A one-sided put always checks its source."},
    [MPN_PARAM_KERNEL_SYNC] = {"MPINCCL_KERNEL_SYNC", MPN_PARAM_INT, "4194304", NULL, 0, 1 << 30,
                               "Between processes whose kernels run at the same time (MPS, or "
                               "one process per GPU), a stream's flag writes and waits of one "
                               "group (always when the group has one stream, else from "
                               "MPINCCL_KERNEL_SYNC_WAITS waits) and its copies between ranks of one "
                               "GPU, when they total at most this many bytes, run as one kernel "
                               "that polls the flags (one block per 64 KiB of copies, up to 32 "
                               "and half the GPU's multiprocessors shared among its ranks, where "
                               "none are free one block and at most 512 KiB; one "
                               "block and at most 512 KiB in a launch of several streams; in a launch "
                               "captured in a CUDA graph, blocks the graph holds until it is destroyed, "
                               "or where none are free one block and at most 64 KiB, or 512 KiB in 8 "
                               "copies or more) "
                               "instead of stream memory operations around copies; 0: always "
                               "memory operations."},
    [MPN_PARAM_KERNEL_SYNC_WAITS] = {"MPINCCL_KERNEL_SYNC_WAITS", MPN_PARAM_INT, "3", NULL, 1, 96,
                                     "Fewest waits of a stream in one group for which that polling "
                                     "kernel is used (MPINCCL_KERNEL_SYNC) by one-sided calls and by "
                                     "send/receive groups of several streams; with fewer, stream "
                                     "memory operations were faster on the GPU machine."},
    [MPN_PARAM_KERNEL_SYNC_EARLY] = {"MPINCCL_KERNEL_SYNC_EARLY", MPN_PARAM_INT, "1", NULL, 0, 1,
                                     "1: a polling kernel of one block (MPINCCL_KERNEL_SYNC) is "
                                     "launched as a programmatic dependent launch (compute capability "
                                     "9.0), so that it is resident while the library's kernel before it "
                                     "on the stream still runs and starts the moment that one ends "
                                     "(H200, MPS: the 8-rank signal barrier 8.2-9.3 us against 12.0-12.1 "
                                     "us); 0: ordinary launches."},
    [MPN_PARAM_COPY_KERNEL_MAX] = {"MPINCCL_COPY_KERNEL_MAX", MPN_PARAM_INT, "65536", NULL, 0, 1 << 30,
                                   "Messages of at most this many bytes to or from a GPU this rank "
                                   "reaches (its own, or another with peer access) that a rank moves in one group are "
                                   "copied by one kernel launch "
                                   "instead of one copy-engine copy each (the 26-neighbour halo "
                                   "exchange of docs/PERFORMANCE-HISTORY.md ran 1.9x faster with MPS, 1.2x "
                                   "without); 0 keeps the copy engine for all."},
    [MPN_PARAM_EAGER_MAX] = {"MPINCCL_EAGER_MAX", MPN_PARAM_INT, "4096", NULL, 0, 4096,
                             "Between processes whose kernels run at the same time (on one GPU under MPS, or on "
                             "different GPUs; on a time-sliced GPU see MPINCCL_SLICED_INBOX_WAIT_US), a message of at "
                             "most this many bytes goes through the pair's inbox (one hop: the sender copies "
                             "it in and raises a flag, the receiver copies it out) instead of the two-hop ready/done "
                             "handshake into the receiver's own buffer; at most 4096 (an inbox slot); 0: never."},
    [MPN_PARAM_EAGER_BIG_MAX] = {"MPINCCL_EAGER_BIG_MAX", MPN_PARAM_INT, "385024", NULL, 0, 385024,
                                 "Where the inbox is used (MPINCCL_EAGER_MAX) between processes of one GPU, a larger "
                                 "message of at most this many bytes takes one of the inbox's 4 big slots the same "
                                 "way, when one is free "
                                 "(a halo's faces: one flag hop, the copies beside the sender's pack and the "
                                 "receiver's unpack); at most 385024 (376 KiB); 0: never."},
    [MPN_PARAM_EAGER_GRAPH] = {"MPINCCL_EAGER_GRAPH", MPN_PARAM_INT, "8", NULL, 0, 1000000,
                               "N > 0: messages captured in a CUDA graph, of at most MPINCCL_EAGER_MAX bytes, between "
                               "processes whose kernels run at once (MPS, or different GPUs), in a launch holding at "
                               "least N of them on one stream, each take an inbox slot of their own for the graph's "
                               "life (one flag hop on every replay, as the inbox outside graphs; the pairs this "
                               "process creates take 4 MiB of device memory instead of 2); fewer take the two-hop "
                               "handshake (\"ready\", copy, \"done\"), which replays faster for few messages; 0: "
                               "never."},
    [MPN_PARAM_DELEGATE_WAIT] = {"MPINCCL_DELEGATE_WAIT_US", MPN_PARAM_INT, "50", NULL, 0, 100000,
                                 "Of two ranks of different processes on one GPU, the lower "
                                 "one moves the data of both directions when it can: in a "
                                 "launch whose messages with processes on its GPU all go to "
                                 "that one, it waits up to this many microseconds on the host "
                                 "for the other to post its side, so that only one process needs the GPU's "
                                 "engines in an exchange (without MPS each switch between "
                                 "processes costs a context switch); 0 lets whichever side "
                                 "posts second copy."},
    [MPN_PARAM_PUSH_MIN] = {"MPINCCL_PUSH_MIN", MPN_PARAM_INT, "2097152", NULL, 0, INT64_MAX,
                            "Between processes on different GPUs, a send of at least this many bytes in "
                            "a launch that also receives at least as much from the same peer is moved by "
                            "its own side (MPINCCL_PUSH_WAIT_US): a process's copies to and from one "
                            "peer's CUDA IPC memory run one at a time, so one side moving both "
                            "directions halves the exchange."},
    [MPN_PARAM_PUSH_WAIT] = {"MPINCCL_PUSH_WAIT_US", MPN_PARAM_INT, "100", NULL, 0, 10000000,
                             "Such a send (MPINCCL_PUSH_MIN) is posted after the peer's receive, so that "
                             "its own side moves it: the launch's other messages are posted first, then "
                             "the host waits up to this many microseconds for the peer's receives, and "
                             "posts what is still waiting as it is (the peer moves it). 0: never wait (the "
                             "side that posts second moves both directions)."},
    [MPN_PARAM_SLICED_INBOX_WAIT] = {"MPINCCL_SLICED_INBOX_WAIT_US", MPN_PARAM_INT, "20000", NULL, 0, 10000000,
                                     "Without MPS (processes time-slice the GPU), a launch that exchanges with "
                                     "several processes of its GPU sends its messages of at most "
                                     "MPINCCL_EAGER_BIG_MAX bytes through the receivers' inboxes too (one hop: "
                                     "each side's copy runs in its own time slice, beside its own kernels), and "
                                     "its host waits up to this many microseconds for a slot the receiver has "
                                     "not yet freed (the GPU is behind: the wait costs no GPU time) before the "
                                     "message takes the two-hop path; 0: no inbox on a time-sliced GPU "
                                     "(launches with one such process then always delegate)."},
    [MPN_PARAM_SLICED_GAP] = {"MPINCCL_SLICED_GAP_US", MPN_PARAM_INT, "10", NULL, 0, 10000000,
                              "Without MPS, a launch that exchanges with one other process of its GPU delegates "
                              "its copies to one of the two (MPINCCL_DELEGATE_WAIT_US) while the rank runs no GPU "
                              "work of its own between launches, and takes the inbox like a launch with several "
                              "(MPINCCL_SLICED_INBOX_WAIT_US) once its stream runs at least this many microseconds "
                              "of other work between them (timed with CUDA events, the first two gaps at once, then "
                              "one in 32 launches, one in 256 while delegating; two samples in a row change the "
                              "choice): an application that computes pays the "
                              "context switches anyway, and one hop keeps each side's copies beside its own "
                              "kernels; 0: always delegate."},
    [MPN_PARAM_LOCAL_WAIT] = {"MPINCCL_LOCAL_WAIT_US", MPN_PARAM_INT, "200000", NULL, 0, 60000000,
                              "Under MPS, ranks of one process order their streams with CUDA "
                              "events (a stream memory wait can block the few hardware queues "
                              "of an MPS client); the side that posted first waits up to this "
                              "many microseconds on the host for the other side's event, then "
                              "falls back to a stream memory wait."},
    [MPN_PARAM_RMA_SELF_ELIDE] =
        {"MPINCCL_RMA_SELF_ELIDE", MPN_PARAM_INT, "1", NULL, 0, 1,
         "1: a one-sided signal of a rank to itself is not written where the same stream's waits "
         "of its group consume it, no wait for it was issued before, and a signal of that stream "
         "to another rank of the host is written at the same point (a barrier's: one stream memory "
         "operation fewer per rank); 0: always written."},
    [MPN_PARAM_AHEAD_TIMEOUT] = {"MPINCCL_AHEAD_TIMEOUT", MPN_PARAM_INT, "60", NULL, 1, 3600,
                                 "A message more than 512 ahead of its peer's matching ones (a "
                                 "pair's slots) waits until the peer catches up: the launch posts "
                                 "its other messages first, then, if the peer is another process, "
                                 "waits on the host at most this many seconds per launch; then "
                                 "the held messages fail with ncclInvalidUsage. A message or "
                                 "one-sided signal captured in a CUDA graph whose graph slot is "
                                 "still held (by the one 256 captured messages, or 256 / "
                                 "numRmaCtx captured signals of a context, before it, whose graph "
                                 "is not yet destroyed on both sides; with a peer over UCX, not yet "
                                 "destroyed on this side or, for a signal, whose last replay the "
                                 "peer has not yet taken) waits as long, then fails on both sides "
                                 "(over UCX, on this side)."},
    [MPN_PARAM_IPC_CLOSE_WAIT] =
        {"MPINCCL_IPC_CLOSE_WAIT", MPN_PARAM_INT, "10", NULL, 0, 3600,
         "Seconds the opening of a peer's buffer (CUDA IPC) waits for the closing of this "
         "process's imports of that peer's freed buffers whose memory the new buffer reuses, when "
         "none of them holds the whole new buffer. Imports are closed by a thread of their own, as "
         "the driver's close waits for all of the process's GPU work; an open that needs such a "
         "close done waits at most this long, then fails the message on both sides (its streams "
         "may be waiting for peers that wait for this process: docs/P2P.md, known problem 17)."},
    [MPN_PARAM_NET_TIMEOUT] = {"MPINCCL_NET_TIMEOUT", MPN_PARAM_INT, "10", NULL, 1, 3600,
                               "Seconds after which a peer that UCX cannot reach any more is "
                               "declared failed: its pending transfers fail and the "
                               "communicator reports ncclRemoteError (UCX keepalive at a third "
                               "of it, unless UCX_KEEPALIVE_INTERVAL is set)."},
    [MPN_PARAM_FINALIZE_TIMEOUT] =
        {"MPINCCL_FINALIZE_TIMEOUT", MPN_PARAM_INT, "0", NULL, 0, 86400,
         "ncclCommFinalize and ncclCommDestroy (which finalizes a communicator not yet finalized) wait until "
         "the streams have run every operation the communicator enqueued outside CUDA graphs, as NCCL's do, so "
         "that nothing a stream still uses is freed; a peer that fails is released by the watchdog and "
         "MPINCCL_NET_TIMEOUT. With a value above 0 the wait ends after that many seconds: ncclCommFinalize "
         "returns ncclTimeout (a non-blocking one through ncclCommGetAsyncError), ncclCommDestroy returns it "
         "after freeing the communicator as ncclCommAbort does. 0: no bound (a warning every 10 s)."},
    [MPN_PARAM_UCX_CHUNK] = {"MPINCCL_UCX_CHUNK", MPN_PARAM_INT, "1048576", NULL, 4096, 1 << 30,
                             "Device data sent to or received from a peer over UCX (without "
                             "CUDA support in UCX) moves through pinned host buffers in chunks "
                             "of at least this many bytes: copy to the host, transfer and copy "
                             "to the device overlap chunk by chunk. A message is cut into at "
                             "most MPINCCL_UCX_CHUNKS chunks of this size times a power of two (up to 64 "
                             "times). "
                             "Must be the same on every rank."},
    [MPN_PARAM_UCX_DEPTH] = {"MPINCCL_UCX_DEPTH", MPN_PARAM_INT, "4", NULL, 1, 32,
                             "Staged chunks in flight per UCX peer and direction (pinned host "
                             "memory: depth x the largest chunk a lane has carried, per peer "
                             "and direction in use)."},
    [MPN_PARAM_UCX_DIRECT] = {"MPINCCL_UCX_DIRECT", MPN_PARAM_INT, "1", NULL, 0, 2,
                              "1: pinned host memory goes to UCX unstaged, cut into the same "
                              "chunks; 2: device memory too, as a send's source, where UCX "
                              "reports CUDA support (never run yet: the proxy thread has no "
                              "CUDA context, which UCX before its relaxed context handling "
                              "needs); 0: every buffer is staged."},
    [MPN_PARAM_UCX_CHUNKS] = {"MPINCCL_UCX_CHUNKS", MPN_PARAM_INT, "8", NULL, 1, 64,
                              "Most chunks a message over UCX is cut into (each chunk is three "
                              "stream operations on its lane; a long stream queue blocks the "
                              "thread that enqueues): larger messages get larger chunks, up to 64 "
                              "times MPINCCL_UCX_CHUNK. Must be the same on every rank."},
    [MPN_PARAM_FLAGS] = {"MPINCCL_FLAGS", MPN_PARAM_CHOICE, "auto", "auto|host|device", 0, 0,
                         "Where the stream flags of two ranks' message slots live: host "
                         "(shared memory registered with CUDA), device (GPU memory shared "
                         "through CUDA IPC; waits poll the GPU's own memory: faster on the GPU "
                         "machine), or auto: device when the rank that sets the pair up has a "
                         "GPU and the memory can be had, else host. That rank decides for both."},
    [MPN_PARAM_NUM_RMA_CTX] = {"NCCL_NUM_RMA_CTX", MPN_PARAM_INT, "-1", NULL, INT32_MIN, INT32_MAX,
                               "One-sided contexts of every communicator created, in place of "
                               "config->numRmaCtx (and of a split's inherited count), as in NCCL: 0 "
                               "leaves communicators without one-sided operations; a negative value "
                               "changes nothing; above 64, the most mpinccl supports, creation is "
                               "refused."},
    [MPN_PARAM_DEBUG] = {"NCCL_DEBUG", MPN_PARAM_CHOICE, "NONE", "NONE|VERSION|WARN|INFO|TRACE", 0, 0,
                         "Log level; INFO shows the version, ranks, devices, GPU sharing, transports and parameters; "
                         "TRACE with subsystem P2P or RMA also each batch of stream memory operations and each "
                         "kernel the library enqueues. Another value is not refused (as with NCCL): the "
                         "log says so and uses WARN."},
    [MPN_PARAM_DEBUG_SUBSYS] = {"NCCL_DEBUG_SUBSYS", MPN_PARAM_STRING, "INIT,ENV", NULL, 0, 0,
                                "Subsystems logged at INFO and TRACE: comma-separated list of "
                                "INIT, BOOTSTRAP, P2P, RMA, IPC, NET, PROXY, ENV, ALL; a leading "
                                "^ excludes the listed ones."},
    [MPN_PARAM_DEBUG_FILE] = {"NCCL_DEBUG_FILE", MPN_PARAM_STRING, "", NULL, 0, 0,
                              "Log to this file instead of stderr; %h is replaced by the host "
                              "name and %p by the process id. The three NCCL_DEBUG variables are "
                              "read at the first message and again after ncclResetDebugInit(), "
                              "which also closes this file."},
};

/* loaded is set last, with release order, after the values it publishes;
 * readers that see it set read them without the lock. */
static struct {
  atomic_int loaded;
  ncclResult_t status;
  char error[256];
  int set[MPN_PARAM_COUNT];
  int64_t ival[MPN_PARAM_COUNT];
  char sval[MPN_PARAM_COUNT][256];
} params;
static pthread_mutex_t params_lock = PTHREAD_MUTEX_INITIALIZER;

/* Returns 0 if value is one of the "a|b|c" choices (case-insensitive). */
static int choice_index(const char* choices, const char* value) {
  size_t len = strlen(value);
  int idx = 0;
  for (const char* p = choices; *p; idx++) {
    const char* bar = strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : strlen(p);
    if (n == len && strncasecmp(p, value, n) == 0) return idx;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

/* Reads text (blanks around it left out) as parameter id's value. */
static int parse_one(int id, const char* raw) {
  const mpn_param_desc_t* d = &mpn_param_table[id];
  while (*raw == ' ' || *raw == '\t') raw++;
  size_t len = strlen(raw);
  while (len > 0 && (raw[len - 1] == ' ' || raw[len - 1] == '\t' || raw[len - 1] == '\n')) len--;
  snprintf(params.sval[id], sizeof(params.sval[id]), "%.*s", (int)len, raw);
  const char* text = params.sval[id];
  if (d->type == MPN_PARAM_CHOICE) {
    if (choice_index(d->choices, text) < 0) {
      snprintf(params.error, sizeof(params.error), "%s=%.200s is not one of %s", d->name, text, d->choices);
      return -1;
    }
  } else if (d->type == MPN_PARAM_INT) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 0);
    if (errno || end == text || *end != '\0' || v < d->min || v > d->max) {
      snprintf(params.error, sizeof(params.error), "%s=%.200s is not an integer in [%lld, %lld]", d->name, text,
               (long long)d->min, (long long)d->max);
      return -1;
    }
    params.ival[id] = v;
  }
  return 0;
}

static void load_locked(void) {
  params.status = ncclSuccess;
  params.error[0] = '\0';
  for (int id = 0; id < MPN_PARAM_COUNT; id++) {
    const char* env = getenv(mpn_param_table[id].name);
    params.set[id] = env != NULL && *env != '\0';
    if (parse_one(id, mpn_param_table[id].deflt) != 0) params.status = ncclInternalError;
    if (params.set[id] && parse_one(id, env) != 0) {
      parse_one(id, mpn_param_table[id].deflt);
      /* NCCL ignores a NCCL_DEBUG it does not know; the log says it uses WARN (debug.c). */
      if (id == MPN_PARAM_DEBUG) continue;
      /* NCCL reads NCCL_P2P_DISABLE with strtol and disables on 1 only. */
      if (id == MPN_PARAM_P2P_DISABLE) {
        params.ival[id] = strtoll(env, NULL, 0) == 1;
        continue;
      }
      params.status = ncclInvalidArgument;
      break;
    }
  }
  atomic_store_explicit(&params.loaded, 1, memory_order_release);
}

static ncclResult_t load(int force) {
  pthread_mutex_lock(&params_lock);
  if (force || !atomic_load_explicit(&params.loaded, memory_order_relaxed)) load_locked();
  ncclResult_t res = params.status;
  pthread_mutex_unlock(&params_lock);
  if (res != ncclSuccess) return mpn_error_set(NULL, res, "%s", params.error);
  return ncclSuccess;
}

static int loaded(void) { return atomic_load_explicit(&params.loaded, memory_order_acquire); }

ncclResult_t mpn_params_load(void) { return load(0); }
ncclResult_t mpn_params_reload(void) { return load(1); }

int64_t mpn_param_int(mpn_param_id_t id) {
  if (!loaded()) load(0);
  return params.ival[id];
}

const char* mpn_param_str(mpn_param_id_t id) {
  if (!loaded()) load(0);
  return params.sval[id];
}

int mpn_param_is_set(mpn_param_id_t id) {
  if (!loaded()) load(0);
  return params.set[id];
}

void mpn_params_log(void) {
  if (!mpn_log_enabled(MPN_LOG_INFO, MPN_SUBSYS_ENV)) return;
  for (int id = 0; id < MPN_PARAM_COUNT; id++)
    MPN_INFO(MPN_SUBSYS_ENV, "%s=%s%s", mpn_param_table[id].name, mpn_param_str(id),
             mpn_param_is_set(id) ? "" : " (default)");
}

void mpn_params_print_markdown(FILE* out) {
  fprintf(out, "| variable | default | meaning |\n| --- | --- | --- |\n");
  for (int id = 0; id < MPN_PARAM_COUNT; id++) {
    const mpn_param_desc_t* d = &mpn_param_table[id];
    fprintf(out, "| `%s` | `%s` | %s", d->name, *d->deflt ? d->deflt : "(unset)", d->help);
    if (d->choices) {
      fprintf(out, " Values: ");
      for (const char* c = d->choices; *c; c++) fputs(*c == '|' ? ", " : (char[]){*c, 0}, out);
      fputc('.', out);
    }
    fprintf(out, " |\n");
  }
}
