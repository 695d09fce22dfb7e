/*
 * test_comm_local_peers.c - test_comm_local's tests of how a rank sees its
 * peers, on made-up topologies where needed: the GPUs reached directly, the
 * sends pushed, the ops moved to alias streams, peers found dead, and a
 * /dev/shm of the process's own.
 */
#define _GNU_SOURCE /* unshare */
#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/alias.h"
#include "core/comm.h"
#include "core/param.h"
#include "core/topo.h"
#include "core/watchdog.h"
#include "local_comm.h"
#include "mpinccl.h"
#include "p2p/p2p.h"
#include "p2p/push.h"
#include "test_comm_local.h"
#include "transport.h"

/* Rank r of t as on GPU gpu (0, 1, 2: three GPUs of this host) of process
 * proc, listing the GPUs in apart as out of its GPU's reach. */
static void describe_gpu(mpn_topo_t* t, int r, int gpu, uint64_t proc, const int* apart, int napart) {
  static const char* bus[3] = {"0000:1a:00.0", "0000:2b:00.0", "0000:3c:00.0"};
  mpn_rank_info_t* x = &t->ranks[r];
  x->cuda_dev = gpu;
  x->proc = proc;
  memset(x->uuid, 0, sizeof(x->uuid));
  x->uuid[0] = (unsigned char)(gpu + 1);
  memset(x->pci_bus, 0, sizeof(x->pci_bus));
  memcpy(x->pci_bus, bus[gpu], strlen(bus[gpu]));
  x->napart = napart;
  for (int i = 0; i < napart; i++) {
    char b[16] = {0};
    memcpy(b, bus[apart[i]], strlen(bus[apart[i]]));
    x->apart[i] = mpn_topo_bus_hash(b);
  }
}

/* Communicators whose rank 0 sees a made-up topology (describe_gpu) and
 * transports; synthetic_end puts the real ones back and destroys them. */
typedef struct {
  ncclComm_t comms[MAXR];
  int n;
  mpn_rank_info_t saved[MAXR];
  uint8_t kinds[MAXR];
} synthetic_t;

static mpn_topo_t* synthetic_begin(synthetic_t* s, int n) {
  use_local_bootstrap();
  s->n = n;
  group_create(s->comms, n);
  mpn_topo_t* t = &s->comms[0]->topo;
  memcpy(s->saved, t->ranks, (size_t)n * sizeof(s->saved[0]));
  memcpy(s->kinds, s->comms[0]->transport, (size_t)n * sizeof(s->kinds[0]));
  return t;
}

static void synthetic_end(synthetic_t* s) {
  memcpy(s->comms[0]->topo.ranks, s->saved, (size_t)s->n * sizeof(s->saved[0]));
  memcpy(s->comms[0]->transport, s->kinds, (size_t)s->n * sizeof(s->kinds[0]));
  for (int i = 0; i < s->n; i++) ck_assert_int_eq(ncclCommDestroy(s->comms[i]), ncclSuccess);
}

/* Peers on other GPUs of the host: reached directly (CUDA IPC, or plain
 * pointers within a process) unless either rank's process sees the other's
 * GPU and finds no peer access both ways; the others go through UCX, and
 * MPINCCL_TRANSPORT=ipc refuses them by name.  A GPU a process does not
 * see (CUDA_VISIBLE_DEVICES) counts as reachable, but not another MIG
 * instance of the same GPU. */
START_TEST(peer_gpus_reached) {
  synthetic_t syn;
  mpn_topo_t* t = synthetic_begin(&syn, 5);
  ncclComm_t* comms = syn.comms;
  uint64_t me = t->ranks[0].proc;
  const int gpu2[1] = {2}, gpu0[1] = {0};
  describe_gpu(t, 0, 0, me, gpu2, 1);     /* this rank: GPU 0, which cannot map GPU 2 */
  describe_gpu(t, 1, 0, me + 1, NULL, 0); /* another process on GPU 0 */
  describe_gpu(t, 2, 1, me + 2, NULL, 0); /* GPU 1: nobody finds it apart */
  describe_gpu(t, 3, 2, me + 3, NULL, 0); /* GPU 2, its process sees no other GPU */
  describe_gpu(t, 4, 2, me, gpu0, 1);     /* this process, GPU 2 */
  ck_assert(mpn_topo_direct(t, 0, 1));
  ck_assert(mpn_topo_direct(t, 0, 2) && mpn_topo_direct(t, 2, 0));
  ck_assert(!mpn_topo_direct(t, 0, 3) && !mpn_topo_direct(t, 3, 0)); /* one side's word is enough */
  ck_assert(!mpn_topo_direct(t, 0, 4));
  t->ranks[2].napart = 1; /* GPU 1's process finds GPU 0 apart */
  t->ranks[2].apart[0] = t->ranks[4].apart[0];
  ck_assert(!mpn_topo_direct(t, 0, 2) && !mpn_topo_direct(t, 2, 0));
  t->ranks[2].napart = 0;
  t->ranks[2].host_hash ^= 1; /* the same GPUs on another host */
  ck_assert(!mpn_topo_direct(t, 0, 2));
  t->ranks[2].host_hash ^= 1;
  t->ranks[1].cuda_dev = -1; /* a rank without a GPU */
  ck_assert(!mpn_topo_direct(t, 0, 1));
  t->ranks[1].cuda_dev = 0;
  t->ranks[1].uuid[1] = 7; /* another MIG instance of GPU 0: same PCI bus, another UUID */
  ck_assert(!mpn_topo_direct(t, 0, 1) && !mpn_topo_direct(t, 1, 0));
  t->ranks[1].uuid[1] = 0;
#ifdef HAVE_UCX
  ck_assert_int_eq(mpn_transport_choose(comms[0]), ncclSuccess);
  const uint8_t want[5] = {MPN_TRANSPORT_SELF, MPN_TRANSPORT_IPC, MPN_TRANSPORT_IPC, MPN_TRANSPORT_UCX,
                           MPN_TRANSPORT_UCX};
  for (int p = 0; p < 5; p++) ck_assert_int_eq(comms[0]->transport[p], want[p]);
  set_param("MPINCCL_TRANSPORT", "ipc");
  ck_assert_int_eq(mpn_transport_choose(comms[0]), ncclInvalidUsage);
  ck_assert(contains(ncclGetLastError(comms[0]), "rank 3 (host"));
  ck_assert(contains(ncclGetLastError(comms[0]), "GPU 0000:3c:00.0) cannot be reached by CUDA IPC"));
  unsetenv("MPINCCL_TRANSPORT");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
#endif
  synthetic_end(&syn);
}
END_TEST

/* Which ops of a launch (up to 8, the first n_p2p in the send/receive list,
 * the rest one-sided) move to alias streams: op i on stream s[i] of a
 * communicator on device dev[i]. */
static int alias_moves(const cudaStream_t* s, const int* dev, int n, int n_p2p, unsigned char* moved) {
  struct ncclComm comms[8];
  mpn_op_t ops[8];
  memset(comms, 0, sizeof(comms));
  memset(ops, 0, sizeof(ops));
  mpn_op_t* lists[2] = {n_p2p ? &ops[0] : NULL, n_p2p < n ? &ops[n_p2p] : NULL};
  for (int i = 0; i < n; i++) {
    comms[i].cuda_dev = dev[i];
    ops[i] = (mpn_op_t){.kind = i < n_p2p ? MPN_OP_SEND : MPN_OP_SIGNAL, .comm = &comms[i], .stream = s[i]};
    if (i + 1 < n && i + 1 != n_p2p) ops[i].next = &ops[i + 1];
  }
  return mpn_alias_select(lists, moved);
}

/* Default stream handles (NULL, cudaStreamLegacy, cudaStreamPerThread) name
 * one stream per device: in a launch over several GPUs the ops of every
 * device but the first that used the handle move to an alias stream
 * (core/alias.h); other handles, and handles used on one device, stay. */
START_TEST(alias_selection) {
  const cudaStream_t L = cudaStreamLegacy, T = cudaStreamPerThread, mine = (cudaStream_t)(uintptr_t)0x1000;
  unsigned char m[8];
  /* the legacy stream on GPUs 0, 1, 0, 1: the GPU 1 ops move */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, NULL, NULL, NULL}, (int[]){0, 1, 0, 1}, 4, 4, m), 2);
  ck_assert(!m[0] && m[1] && !m[2] && m[3]);
  /* one GPU, or a stream of the caller's own: nothing moves */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, T, NULL, T}, (int[]){2, 2, 2, 2}, 4, 4, m), 0);
  ck_assert_int_eq(alias_moves((cudaStream_t[]){mine, mine}, (int[]){0, 1}, 2, 2, m), 0);
  /* NULL and cudaStreamLegacy are different handles: each on one GPU */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, L}, (int[]){0, 1}, 2, 2, m), 0);
  /* the first GPU to use a handle keeps it, whichever that is */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){T, T, T, L, L}, (int[]){1, 0, 1, 0, 3}, 5, 5, m), 2);
  ck_assert(!m[0] && m[1] && !m[2] && !m[3] && m[4]);
  /* across the lists: a signal of GPU 1 after a send of GPU 0 */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){NULL, NULL, NULL}, (int[]){0, 0, 1}, 3, 2, m), 1);
  ck_assert(!m[0] && !m[1] && m[2]);
  /* the count alone */
  ck_assert_int_eq(alias_moves((cudaStream_t[]){T, T}, (int[]){0, 1}, 2, 2, NULL), 1);
}
END_TEST

/* Which sends wait to move their own data (p2p/push.h): to another process
 * on another GPU, from MPINCCL_PUSH_MIN bytes, in a launch that receives as
 * much from that peer; nothing where MPINCCL_PUSH_WAIT_US is 0. */
static void push_marks(ncclComm_t c, const mpn_op_kind_t* kind, const int* peer, const size_t* bytes, int n,
                       int* marked) {
  mpn_op_t ops[8];
  plan_t plans[8];
  memset(ops, 0, sizeof(ops));
  memset(plans, 0, sizeof(plans));
  for (int i = 0; i < n; i++) {
    ops[i] = (mpn_op_t){.kind = kind[i], .comm = c, .peer = peer[i], .bytes = bytes[i], .count = bytes[i]};
    plans[i].op = &ops[i];
    plans[i].prepared = 1;
  }
  mpn_push_mark(plans, n);
  for (int i = 0; i < n; i++) marked[i] = plans[i].push;
}

START_TEST(push_own_sends) {
  synthetic_t syn;
  mpn_topo_t* t = synthetic_begin(&syn, 3);
  ncclComm_t* comms = syn.comms;
  uint64_t me = t->ranks[0].proc;
  describe_gpu(t, 0, 0, me, NULL, 0);
  describe_gpu(t, 1, 0, me + 1, NULL, 0); /* another process, same GPU */
  describe_gpu(t, 2, 1, me + 2, NULL, 0); /* another process, another GPU */
  comms[0]->transport[1] = comms[0]->transport[2] = MPN_TRANSPORT_IPC;
  const size_t big = 2 << 20, small = 512 << 10;
  const mpn_op_kind_t S = MPN_OP_SEND, R = MPN_OP_RECV;
  int m[8];
  /* sendrecv with rank 2, then with rank 1 (same GPU), in one launch */
  push_marks(comms[0], (mpn_op_kind_t[]){S, R, S, R}, (int[]){2, 2, 1, 1}, (size_t[]){big, big, big, big}, 4, m);
  ck_assert(m[0] && !m[1] && !m[2] && !m[3]);
  /* a small receive, or none, from rank 2: one side moves one direction anyway */
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, small}, 2, m);
  ck_assert(!m[0] && !m[1]);
  push_marks(comms[0], (mpn_op_kind_t[]){S, S}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0] && !m[1]);
  /* a small send with a large receive */
  push_marks(comms[0], (mpn_op_kind_t[]){R, S}, (int[]){2, 2}, (size_t[]){big, small}, 2, m);
  ck_assert(!m[0] && !m[1]);
  set_param("MPINCCL_PUSH_MIN", "4194304");
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0]);
  set_param("MPINCCL_PUSH_MIN", "1");
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){small, small}, 2, m);
  ck_assert(m[0] && !m[1]);
  set_param("MPINCCL_PUSH_WAIT_US", "0");
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0]);
  unsetenv("MPINCCL_PUSH_MIN");
  unsetenv("MPINCCL_PUSH_WAIT_US");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  comms[0]->transport[2] = MPN_TRANSPORT_LOCAL; /* ranks of this process: plain pointers, not pushed */
  push_marks(comms[0], (mpn_op_kind_t[]){S, R}, (int[]){2, 2}, (size_t[]){big, big}, 2, m);
  ck_assert(!m[0]);
  synthetic_end(&syn);
}
END_TEST

/* Two ranks of this process, rank 1 presented to rank 0 as another
 * process of this host whose pid now names no process; that pid. */
static pid_t pair_with_dead_peer(ncclComm_t comms[2]) {
  group_create(comms, 2);
  pid_t child = fork();
  if (child == 0) _exit(0);
  ck_assert_int_gt(child, 0);
  waitpid(child, NULL, 0);
  comms[0]->topo.ranks[1].proc ^= 1;
  comms[0]->topo.ranks[1].pid = child;
  return child;
}

/* A peer whose process is gone: ncclRemoteError with its name, once. */
START_TEST(watchdog_peer_gone) {
  use_local_bootstrap();
  ncclComm_t comms[2];
  pid_t child = pair_with_dead_peer(comms);
  ck_assert_int_eq(mpn_watchdog_check(comms[1]), 0); /* rank 0 is alive */
  ck_assert_int_eq(mpn_watchdog_check(comms[0]), 1);
  ck_assert_int_eq(mpn_watchdog_check(comms[0]), 0); /* reported once */
  ncclResult_t async;
  ck_assert_int_eq(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclRemoteError);
  char want[64];
  snprintf(want, sizeof(want), "rank 1 (process %d on", (int)child);
  ck_assert(contains(ncclGetLastError(comms[0]), want));
  ck_assert_int_eq(ncclCommGetAsyncError(comms[1], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclSuccess);
  ck_assert_int_eq(ncclCommAbort(comms[0]), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comms[1]), ncclSuccess);
}
END_TEST

/* A peer that dies while a rank finalizes is found all the same: finalize
 * and destroy wait for the streams, which only the watchdog releases then
 * (README: "A peer that fails releases the waits"). */
START_TEST(watchdog_after_finalize) {
  use_local_bootstrap();
  ncclComm_t comms[2];
  pair_with_dead_peer(comms);
  ck_assert_int_eq(ncclCommFinalize(comms[0]), ncclSuccess); /* nothing enqueued: done at once */
  ck_assert_int_eq(mpn_watchdog_check(comms[0]), 1);
  ncclResult_t async;
  ck_assert_int_eq(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
  ck_assert_int_eq(async, ncclRemoteError);
  ck_assert_int_eq(ncclCommAbort(comms[0]), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comms[1]), ncclSuccess);
}
END_TEST

/* A process with a /dev/shm of its own (a container of the same machine,
 * with its network and name, but no shared IPC namespace) describes another
 * host: its peers reach it over UCX, not through pair files in a /dev/shm
 * it never sees.  Checked in a child in a mount namespace of its own, where
 * the machine lets the test make one (as root in CI). */
static void private_shm_child(int fd) {
  uint64_t h = 0;
  mpn_rank_info_t r;
  /* (the propagation change ignores source and type; named, so that valgrind
   * does not take a NULL type for a bad pointer) */
  if (unshare(CLONE_NEWNS) == 0 && mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) == 0 &&
      mount("none", "/dev/shm", "tmpfs", 0, NULL) == 0 && mpn_topo_describe_self(-1, &r) == ncclSuccess)
    h = r.host_hash;
  ssize_t w = write(fd, &h, sizeof(h));
  _exit(w == (ssize_t)sizeof(h) ? 0 : 1);
}

START_TEST(private_shm_is_another_host) {
  mpn_rank_info_t a, b;
  ck_assert_int_eq(mpn_topo_describe_self(-1, &a), ncclSuccess);
  ck_assert_int_eq(mpn_topo_describe_self(-1, &b), ncclSuccess);
  ck_assert_uint_eq(a.host_hash, b.host_hash);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) private_shm_child(fds[1]);
  close(fds[1]);
  uint64_t h = 0;
  ck_assert_int_eq(read(fds[0], &h, sizeof(h)), (ssize_t)sizeof(h));
  close(fds[0]);
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  if (h == 0) {
    fprintf(stderr, "private_shm_is_another_host: no mount namespace allowed here; only the same-host half ran\n");
    return;
  }
  ck_assert_uint_ne(h, a.host_hash);
}
END_TEST

/* A communicator of more ranks than the UCX tags carry, with peers over
 * UCX (here ranks of other processes without GPUs), is refused when its
 * transports are chosen: senders 8192 apart would take each other's data. */
START_TEST(ucx_rank_limit) {
  mpn_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  struct ncclComm* comm = NULL;
  ck_assert_int_eq(mpn_comm_alloc(&cfg, -1, &comm), ncclSuccess);
  int n = MPN_TRANSPORT_UCX_MAX_RANKS + 1;
  comm->rank = 0;
  comm->nranks = n;
  comm->topo.ranks = calloc((size_t)n, sizeof(*comm->topo.ranks));
  ck_assert_ptr_nonnull(comm->topo.ranks);
  for (int i = 0; i < n; i++) {
    comm->topo.ranks[i].proc = 1000 + (uint64_t)i;
    comm->topo.ranks[i].cuda_dev = -1;
  }
  ck_assert_int_eq(mpn_transport_choose(comm), ncclInvalidUsage);
  ck_assert_msg(contains(ncclGetLastError(comm), "communicator of 8193 ranks; mpinccl supports at most 8192"), "%s",
                ncclGetLastError(comm));
  comm->nranks = n - 1; /* (then UCX is probed, or refused as not built in) */
  ncclResult_t res = mpn_transport_choose(comm);
  ck_assert(res == ncclSuccess || !contains(ncclGetLastError(comm), "supports at most"));
  ck_assert_int_eq(comm->transport[1], MPN_TRANSPORT_UCX);
  mpn_comm_free(comm);
}
END_TEST

void comm_local_add_peers(TCase* tc) {
  tcase_add_test(tc, watchdog_peer_gone);
  tcase_add_test(tc, watchdog_after_finalize);
  tcase_add_test(tc, peer_gpus_reached);
  tcase_add_test(tc, push_own_sends);
  tcase_add_test(tc, alias_selection);
  tcase_add_test(tc, private_shm_is_another_host);
  tcase_add_test(tc, ucx_rank_limit);
}
