/*
 * test_ucx_host.c - the UCX layer moving host memory between processes
 * (MPINCCL_TRANSPORT=ucx puts every other-process peer on UCX): a ring of
 * sizes from 1 byte to 16 MiB, an all-to-all, several messages to one peer
 * arriving in order, one-sided puts whose signals follow their data,
 * operations that start only when a trigger word says so, the proxy's side
 * of the staged path (explicit tags, growing flags, released words, a short
 * chunk that both sides report), the destroy of a rank that has no UCX
 * peer of its own, two live communicators whose keys fold to one tag
 * prefix (each must get its own), and the proxy's stop at the process's
 * exit.  The failures and closes are test_ucx_failures'.  Completion flags
 * are polled with a deadline, so a lost message fails the test instead of
 * hanging it.
 */
#include "core/comm.h"
#include "mpinccl.h"
#include "transport.h"
#include "ucx/net.h"
#include "ucx/proxy.h"
#include "ucx/rma.h"
#include "ucx_host_test.h"

static void ring(ncclComm_t comm, size_t bytes, int k) {
  if (nranks < 2) return;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  unsigned char *s = malloc(bytes + 1), *r = calloc(bytes + 1, 1);
  for (size_t i = 0; i < bytes; i++) s[i] = byte_of(rank, to, i, k);
  uint64_t flags[2] = {0, 0};
  int error = 0;
  EXPECT(mpn_ucx_host_recv(comm, from, r, bytes, &flags[0], 1, &error) == ncclSuccess);
  EXPECT(mpn_ucx_host_send(comm, to, s, bytes, &flags[1], 1, &error) == ncclSuccess);
  EXPECT(wait_flags(flags, 2, 1) == 0);
  EXPECT(error == 0);
  size_t bad = 0;
  for (size_t i = 0; i < bytes; i++) bad += r[i] != byte_of(from, rank, i, k);
  if (bad) fprintf(stderr, "[rank %d] ring %zu bytes: %zu wrong\n", rank, bytes, bad);
  failures += bad != 0;
  free(s);
  free(r);
}

/* Every other rank, three messages each, in one burst. */
static void all_to_all(ncclComm_t comm) {
  enum { K = 3, BYTES = 10000 };
  unsigned char* s = malloc((size_t)nranks * K * BYTES);
  unsigned char* r = calloc((size_t)nranks * K * BYTES, 1);
  uint64_t* flags = calloc((size_t)nranks * K * 2, sizeof(uint64_t));
  int error = 0, n = 0;
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    for (int k = 0; k < K; k++) {
      unsigned char* sb = s + ((size_t)p * K + k) * BYTES;
      for (size_t i = 0; i < BYTES; i++) sb[i] = byte_of(rank, p, i, 10 + k);
      EXPECT(mpn_ucx_host_send(comm, p, sb, BYTES, &flags[n++], 7, &error) == ncclSuccess);
      EXPECT(mpn_ucx_host_recv(comm, p, r + ((size_t)p * K + k) * BYTES, BYTES, &flags[n++], 7, &error) == ncclSuccess);
    }
  }
  EXPECT(wait_flags(flags, n, 7) == 0);
  EXPECT(error == 0);
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    for (int k = 0; k < K; k++) {
      size_t bad = 0;
      const unsigned char* rb = r + ((size_t)p * K + k) * BYTES;
      for (size_t i = 0; i < BYTES; i++) bad += rb[i] != byte_of(p, rank, i, 10 + k);
      if (bad) fprintf(stderr, "[rank %d] from %d message %d: %zu wrong\n", rank, p, k, bad);
      failures += bad != 0;
    }
  }
  free(s);
  free(r);
  free(flags);
}

/* One-sided: every rank puts a block into every other rank's region at its
 * own offset, each put adding 1 to the receiver's counter for this sender.
 * When a counter reaches the round, that sender's block of the round must
 * be there.  Three rounds; then the refusals. */
static void put_signal(ncclComm_t comm) {
  enum { BYTES = 100000, ROUNDS = 3 };
  unsigned char* region = calloc((size_t)nranks * BYTES, 1);
  unsigned char* src = malloc((size_t)nranks * BYTES);
  uint64_t* counters = calloc((size_t)nranks, sizeof(uint64_t));
  uint64_t* flags = calloc((size_t)nranks, sizeof(uint64_t));
  mpn_ucx_region_t *data = NULL, *sig = NULL;
  EXPECT(mpn_ucx_region_register(comm, region, (size_t)nranks * BYTES, &data) == ncclSuccess);
  EXPECT(mpn_ucx_region_register(comm, counters, (size_t)nranks * sizeof(uint64_t), &sig) == ncclSuccess);
  int error = 0;
  for (int k = 1; data && sig && k <= ROUNDS; k++) {
    for (int p = 0; p < nranks; p++) {
      if (p == rank) continue;
      unsigned char* b = src + (size_t)p * BYTES;
      for (size_t i = 0; i < BYTES; i++) b[i] = byte_of(rank, p, i, 20 + k);
      EXPECT(mpn_ucx_host_put_signal(comm, p, b, BYTES, data, (size_t)rank * BYTES, sig,
                                     (size_t)rank * sizeof(uint64_t), &flags[p], (uint64_t)k,
                                     &error) == ncclSuccess);
    }
    time_t end = time(NULL) + 30;
    for (int p = 0; p < nranks; p++) {
      if (p == rank) continue;
      while (__atomic_load_n(&counters[p], __ATOMIC_ACQUIRE) < (uint64_t)k && time(NULL) <= end) {
      }
      EXPECT(__atomic_load_n(&counters[p], __ATOMIC_ACQUIRE) == (uint64_t)k);
      size_t bad = 0;
      for (size_t i = 0; i < BYTES; i++) bad += region[(size_t)p * BYTES + i] != byte_of(p, rank, i, 20 + k);
      if (bad) fprintf(stderr, "[rank %d] put from %d, round %d: %zu wrong\n", rank, p, k, bad);
      failures += bad != 0;
    }
    for (int p = 0; p < nranks; p++) {
      if (p == rank) continue;
      while (__atomic_load_n(&flags[p], __ATOMIC_ACQUIRE) != (uint64_t)k && time(NULL) <= end) {
      }
      EXPECT(flags[p] == (uint64_t)k);
    }
    EXPECT(error == 0);
    MPI_Barrier(MPI_COMM_WORLD); /* nobody puts again before the others checked */
  }
  if (data && sig) {
    int to = (rank + 1) % nranks;
    uint64_t flag = 0;
    EXPECT(mpn_ucx_host_put_signal(comm, to, src, BYTES + 1, data, (size_t)(nranks - 1) * BYTES, sig, 0,
                                   &flag, 1, &error) == ncclInvalidArgument);
    EXPECT(mpn_ucx_host_put_signal(comm, to, src, 8, data, 0, sig, 4, &flag, 1, &error) == ncclInvalidArgument);
    /* an offset whose end wraps past SIZE_MAX (it passed as offset 0) */
    EXPECT(mpn_ucx_host_put_signal(comm, to, src, 8, data, 0, sig, SIZE_MAX - 7, &flag, 1, &error) ==
           ncclInvalidArgument);
    EXPECT(mpn_ucx_host_put_signal(comm, rank, src, 8, data, 0, sig, 0, &flag, 1, &error) == ncclInvalidUsage);
  }
  if (data) EXPECT(mpn_ucx_region_deregister(comm, data) == ncclSuccess);
  if (sig) EXPECT(mpn_ucx_region_deregister(comm, sig) == ncclSuccess);
  free(region), free(src), free(counters), free(flags);
}

/* Operations armed on a trigger word start only when it comes, and in post
 * order: each rank arms two sends to the next rank on its word (values 1
 * and 2); nothing may move while the word is 0, only the first once it is
 * 1, both once it is 2.  (On the GPU a stream writes the word.) */
static void triggered(ncclComm_t comm) {
  enum { BYTES = 4096 };
  if (nranks < 2) return;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  static unsigned char s[2][BYTES], r[2][BYTES];
  uint64_t word = 0, sent[2] = {0, 0}, got[2] = {0, 0};
  int error = 0;
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < BYTES; i++) s[k][i] = byte_of(rank, to, i, 30 + k);
    memset(r[k], 0, BYTES);
    EXPECT(mpn_ucx_host_recv(comm, from, r[k], BYTES, &got[k], 1, &error) == ncclSuccess);
  }
  for (int k = 0; k < 2; k++) {
    mpn_ucx_trigger_t when = {&word, (uint64_t)k + 1, 0};
    EXPECT(mpn_ucx_host_send_on(comm, to, s[k], BYTES, &when, &sent[k], 1, &error) == ncclSuccess);
  }
  usleep(100000);
  EXPECT(__atomic_load_n(&sent[0], __ATOMIC_ACQUIRE) == 0 && __atomic_load_n(&got[0], __ATOMIC_ACQUIRE) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
  EXPECT(wait_flags(&sent[0], 1, 1) == 0);
  usleep(50000);
  EXPECT(__atomic_load_n(&sent[1], __ATOMIC_ACQUIRE) == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  __atomic_store_n(&word, 2, __ATOMIC_RELEASE);
  EXPECT(wait_flags(sent, 2, 1) == 0);
  EXPECT(wait_flags(got, 2, 1) == 0);
  EXPECT(error == 0);
  for (int k = 0; k < 2; k++) {
    size_t bad = 0;
    for (size_t i = 0; i < BYTES; i++) bad += r[k][i] != byte_of(from, rank, i, 30 + k);
    if (bad) fprintf(stderr, "[rank %d] triggered message %d: %zu wrong\n", rank, k, bad);
    failures += bad != 0;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

/*
 * The proxy's side of the staged path (ucx/staged.c), on host memory:
 * chunks matched by explicit tags whatever order the receives are posted
 * in, completion flags that only grow, and a chunk shorter than its
 * receive releasing its pipeline's words and failing the communicator
 * with ncclInvalidUsage and the text of a size mismatch.  Last step: it
 * leaves the communicator failed.
 */
static void pipeline(ncclComm_t comm) {
  if (nranks < 2) return;
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  enum { CH = 4096, N = 4 };
  unsigned char *s = malloc(N * CH), *r = calloc(N * CH, 1);
  for (size_t i = 0; i < N * CH; i++) s[i] = byte_of(rank, to, i, 9);
  uint64_t flags[2 * N], release[2] = {0, 0};
  int error = 0;
  for (int c = 0; c < N; c++) flags[c] = flags[N + c] = 0;
  flags[N] = 1000; /* a receive flag above its value stays there */
  /* Receives posted last chunk first; sends in order: tags pair them. */
  for (int c = N - 1; c >= 0; c--)
    EXPECT(mpn_ucx_tagged_on(comm, 0, from, r + c * CH, CH, mpn_ucx_stage_tag(comm, from, rank, 0, c, c == N - 1), NULL,
                             NULL, &flags[N + c], (uint64_t)c + 1, &error, release, 2) == ncclSuccess);
  for (int c = 0; c < N; c++)
    EXPECT(mpn_ucx_tagged_on(comm, 1, to, s + c * CH, CH, mpn_ucx_stage_tag(comm, rank, to, 0, c, c == N - 1), NULL,
                             NULL, &flags[c], (uint64_t)c + 1, &error, release, 2) == ncclSuccess);
  time_t end = time(NULL) + 30;
  int done = 0;
  while (done < 2 * N && time(NULL) <= end) {
    done = 0;
    for (int c = 0; c < N; c++)
      done += (__atomic_load_n(&flags[c], __ATOMIC_ACQUIRE) >= (uint64_t)c + 1) +
              (__atomic_load_n(&flags[N + c], __ATOMIC_ACQUIRE) >= (uint64_t)c + 1);
  }
  EXPECT(done == 2 * N);
  EXPECT(error == 0 && release[0] == 0);
  EXPECT(flags[N] == 1000);
  size_t bad = 0;
  for (size_t i = 0; i < N * CH; i++) bad += r[i] != byte_of(from, rank, i, 9);
  EXPECT(bad == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  /* A chunk shorter than its receive fails: its words are released, and the
   * receiving communicator reports ncclInvalidUsage, as a receive whose count
   * or datatype differs from its send within a host (p2p.c, report_mismatch);
   * the sender hears of it (a notice).  From rank 0 to rank 1 only: in a
   * ring a rank's notice could end its peer's side before that side's own
   * receive finds the short chunk. */
  if (rank == 1) {
    uint64_t flag = 0;
    EXPECT(mpn_ucx_tagged_on(comm, 0, 0, r, 16, mpn_ucx_stage_tag(comm, 0, 1, 1, 0, 1), NULL, NULL, &flag, 7, &error,
                             release, 2) == ncclSuccess);
    EXPECT(wait_flags(&flag, 1, 7) == 0);
    EXPECT(error == ncclInvalidUsage);
    EXPECT(release[0] == UINT64_MAX >> 1 && release[1] == UINT64_MAX >> 1);
  } else if (rank == 0) {
    uint64_t sent = 0;
    int serr = 0;
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, s, 8, mpn_ucx_stage_tag(comm, 0, 1, 1, 0, 1), NULL, NULL, &sent, 1, &serr,
                             NULL, 0) == ncclSuccess);
    EXPECT(wait_flags(&sent, 1, 1) == 0);
  }
  expect_mismatch(comm, 16, "8 came");
  MPI_Barrier(MPI_COMM_WORLD);
  free(s);
  free(r);
}

/*
 * A bare communicator of this rank, its transports set by hand as
 * mpn_transport_choose would set them: UCX between processes, but IPC
 * between rank apart (-1: none) and the others.  Its bootstrap is made
 * over MPI_COMM_WORLD, or with twin (not NULL) over twin's endpoints under
 * twin's key with bit 63 flipped: a key of its own that folds to the same
 * tag prefix (mpn_ucx_prefix_candidate, attempt 0).  NULL on failure.
 */
static struct ncclComm* bare_comm(const mpn_bootstrap_t* twin, int apart) {
  struct ncclComm* c = calloc(1, sizeof(*c));
  uint8_t* transport = calloc((size_t)nranks, 1);
  mpn_rank_info_t* ranks = calloc((size_t)nranks, sizeof(*ranks));
  EXPECT(c && transport && ranks);
  if (!c || !transport || !ranks) {
    free(c), free(transport), free(ranks);
    return NULL;
  }
  *c = (struct ncclComm){.rank = rank, .nranks = nranks, .cuda_dev = -1, .transport = transport};
  pthread_mutex_init(&c->error_lock, NULL);
  c->topo.ranks = ranks;
  ranks[rank].cuda_dev = -1;
  for (int p = 0; p < nranks; p++)
    transport[p] = p == rank ? MPN_TRANSPORT_SELF : rank == apart || p == apart ? MPN_TRANSPORT_IPC : MPN_TRANSPORT_UCX;
  if (twin)
    EXPECT(mpn_bootstrap_create(twin->key ^ 1ull << 63, nranks, rank, twin->eps, &c->abort_flag, &c->bootstrap) ==
           ncclSuccess);
  else
    EXPECT(mpn_bootstrap_from_mpi(MPI_COMM_WORLD, &c->abort_flag, &c->bootstrap) == ncclSuccess);
  return c;
}

/* Frees a bare communicator (bare_comm) and its UCX state, as a clean
 * destroy: nobody may still use its endpoints. */
static void bare_comm_free(struct ncclComm* c) {
  if (c == NULL) return;
  c->ucx_clean = 1; /* as a destroy that found the UCX work done */
  mpn_ucx_comm_free(c);
  if (c->bootstrap) mpn_bootstrap_destroy(c->bootstrap);
  pthread_mutex_destroy(&c->error_lock);
  free(c->transport);
  free(c->topo.ranks);
  free(c);
}

/*
 * A rank with no UCX peer of its own, in a communicator whose other ranks
 * use UCX between them: on a GPU machine, rank 0's GPU reaches the others'
 * through CUDA IPC, and theirs do not reach each other.  Rank 0 has the
 * communicator's UCX state but never started the proxy thread.  A bare
 * communicator, before anything else in this process starts UCX (so it
 * runs first).  Before, rank 0's clean destroy asked the proxy that
 * does not run to flush its endpoints (it has none), waited
 * MPINCCL_BOOTSTRAP_TIMEOUT (120 s) for it, then failed with "the UCX proxy
 * thread does not answer" as its error text.
 */
static void no_ucx_peer_of_its_own(void) {
  if (nranks < 3) return; /* two ranks would both be without UCX peers */
  struct ncclComm* c = bare_comm(NULL, 0);
  if (c == NULL) return;
  EXPECT(c->bootstrap && mpn_ucx_comm_setup(c) == ncclSuccess);
  EXPECT(c->ucx != NULL);
  mpn_error_clear();
  bare_comm_free(c);
  EXPECT(strcmp(ncclGetLastError(NULL), "") == 0);
  MPI_Barrier(MPI_COMM_WORLD);
}

/* Waits (30 s at most) until one of flags[0..n) is set; returns its index, or -1. */
static int wait_any(uint64_t* flags, int n) {
  time_t end = time(NULL) + 30;
  for (;;) {
    for (int i = 0; i < n; i++)
      if (__atomic_load_n(&flags[i], __ATOMIC_ACQUIRE)) return i;
    if (time(NULL) > end) return -1;
  }
}

/*
 * Two live communicators over the same processes whose keys fold to one
 * tag prefix (bare_comm's twin): each must get a prefix of its own, so that
 * neither takes the other's messages.  Each rank posts its receive from the
 * previous rank on the second communicator, then on the first; the first
 * communicator's ring sends go first and must land in the first's receive,
 * then the second's.  With one prefix (before: folded from the key alone)
 * the first message matched the receive posted first, the second's, and
 * the two swapped their data without an error.
 */
static void twin_prefixes(void) {
  enum { BYTES = 256, TWINS = 2 };
  if (nranks < 2) return;
  struct ncclComm* c[TWINS] = {bare_comm(NULL, -1), NULL};
  if (c[0] && c[0]->bootstrap) c[1] = bare_comm(c[0]->bootstrap, -1);
  int ready = c[1] && c[1]->bootstrap;
  for (int k = 0; ready && k < TWINS; k++) ready = mpn_ucx_comm_setup(c[k]) == ncclSuccess;
  EXPECT(ready);
  int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
  unsigned char s[TWINS][BYTES], r[TWINS][BYTES];
  uint64_t got[TWINS] = {0, 0}, sent[TWINS] = {0, 0};
  int error = 0;
  memset(r, 0, sizeof(r));
  for (int k = TWINS - 1; ready && k >= 0; k--)
    EXPECT(mpn_ucx_host_recv(c[k], from, r[k], BYTES, &got[k], 1, &error) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD); /* every receive posted before any send */
  for (int k = 0; k < TWINS; k++) {
    for (size_t i = 0; ready && i < BYTES; i++) s[k][i] = byte_of(rank, to, i, 50 + k);
    if (ready) EXPECT(mpn_ucx_host_send(c[k], to, s[k], BYTES, &sent[k], 1, &error) == ncclSuccess);
    if (ready && k == 0) EXPECT(wait_any(got, TWINS) >= 0); /* the first message came before the second goes */
    MPI_Barrier(MPI_COMM_WORLD);
  }
  if (ready) {
    EXPECT(wait_flags(got, TWINS, 1) == 0 && wait_flags(sent, TWINS, 1) == 0);
    EXPECT(error == 0);
    for (int k = 0; k < TWINS; k++) {
      size_t bad = 0;
      for (size_t i = 0; i < BYTES; i++) bad += r[k][i] != byte_of(from, rank, i, 50 + k);
      if (bad) fprintf(stderr, "[rank %d] twin communicator %d: %zu of %d bytes wrong\n", rank, k, bad, (int)BYTES);
      failures += bad != 0;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD); /* nobody closes endpoints others still use */
  for (int k = TWINS - 1; k >= 0; k--) bare_comm_free(c[k]);
}

/* At the process's exit the proxy stops calling UCX before UCX's own
 * teardown (mpn_ucx_proxy_park): its loop, which goes round every 50 us
 * when idle, goes round no more once parked.  Last: no UCX work after it. */
static void proxy_parks(void) {
  uint64_t before = mpn_ucx_proxy_rounds();
  usleep(20000);
  EXPECT(mpn_ucx_proxy_rounds() > before);
  EXPECT(mpn_ucx_proxy_park(5000) == 1);
  uint64_t parked = mpn_ucx_proxy_rounds();
  usleep(20000);
  EXPECT(mpn_ucx_proxy_rounds() == parked);
  EXPECT(mpn_ucx_proxy_park(0) == 1); /* again, as the exit does */
}

int main(int argc, char** argv) {
  if (!ucx_host_test_start(&argc, &argv)) return 0;
  no_ucx_peer_of_its_own(); /* first: no proxy thread started yet */
  ucx_host_test_step("no_ucx_peer_of_its_own");
  twin_prefixes();
  ucx_host_test_step("twin_prefixes");
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm) {
    for (size_t bytes = 1, k = 0; bytes <= (16u << 20); bytes *= 8, k++) ring(comm, bytes, (int)k);
    ucx_host_test_step("ring");
    all_to_all(comm);
    ucx_host_test_step("all_to_all");
    put_signal(comm);
    ucx_host_test_step("put_signal");
    triggered(comm);
    ucx_host_test_step("triggered");
    pipeline(comm); /* leaves comm failed: last */
    ucx_host_test_step("pipeline");
    int bogus = 0;
    uint64_t flag = 0;
    EXPECT(mpn_ucx_host_send(comm, rank, &bogus, 4, &flag, 1, &bogus) == ncclInvalidUsage);
    MPI_Barrier(MPI_COMM_WORLD); /* nobody closes endpoints others still use */
    EXPECT(ncclCommDestroy(comm) == ncclSuccess);
    proxy_parks();
    ucx_host_test_step("proxy_parks");
  }
  return mpi_test_finish(rank, "test_ucx_host: %d ranks, ", nranks);
}
