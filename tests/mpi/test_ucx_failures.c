/*
 * test_ucx_failures.c - size mismatches over UCX that both sides report
 * (sends and receives cut into different numbers of whole chunks, a
 * captured send the notice must release, a receiver that closes at once
 * after the mismatch), a message that must still arrive when its sender
 * destroys its communicator at once, and an abort with a send in flight;
 * each on a communicator of its own (UCX forced: ucx_host_test.h).
 * Completion flags are polled with a deadline, so a lost message fails
 * the test instead of hanging it.
 */
#include "mpinccl.h"
#include "ucx/net.h"
#include "ucx/proxy.h"
#include "ucx_host_test.h"

/* A communicator of its own, for a step that leaves it failed. */
static ncclComm_t fresh_comm(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  return comm;
}

enum { WHOLE_CH = 1 << 20 }; /* past UCX's eager sizes: an unmatched chunk's send waits */

/* Rank 1's side of whole_chunks: posted receives of WHOLE_CH bytes for
 * message 0 from rank 0, the last one armed on a word that the test writes
 * once the mismatch is reported (as a lane's stream writes "ready" after
 * its copy).  Every flag must come and every pipeline word be released;
 * the receive that met the other cut fails with ncclInvalidUsage, the rest
 * fail (cancelled, or never posted: the armed one moves no data). */
static void whole_recv(ncclComm_t comm, int posted, int bad, size_t expected, const char* came) {
  char* r = calloc((size_t)posted, WHOLE_CH);
  uint64_t flags[8] = {0}, release[2] = {0, 0}, word = 0;
  int errs[8] = {0};
  for (int c = 0; c < posted; c++) {
    mpn_ucx_part_t part = {(size_t)c * WHOLE_CH, (size_t)posted * WHOLE_CH};
    mpn_ucx_trigger_t when = {&word, 1, 0};
    EXPECT(mpn_ucx_tagged_on(comm, 0, 0, r + (size_t)c * WHOLE_CH, WHOLE_CH,
                             mpn_ucx_stage_tag(comm, 0, 1, 0, c, c == posted - 1), &part,
                             c == posted - 1 && c > bad ? &when : NULL, &flags[c], (uint64_t)c + 1, &errs[c], release,
                             2) == ncclSuccess);
  }
  expect_mismatch(comm, expected, came);
  EXPECT(wait_flags(release, 2, UINT64_MAX >> 1) == 0);
  __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
  for (int c = 0; c < posted; c++) EXPECT(wait_flags(&flags[c], 1, (uint64_t)c + 1) == 0);
  EXPECT(errs[bad] == ncclInvalidUsage);
  for (int c = bad + 1; c < posted; c++) EXPECT(__atomic_load_n(&errs[c], __ATOMIC_ACQUIRE) != ncclSuccess);
  size_t moved = 0;
  for (size_t i = (size_t)(bad + 1) * WHOLE_CH; i < (size_t)posted * WHOLE_CH; i++) moved += r[i] != 0;
  EXPECT(moved == 0);
  MPI_Barrier(MPI_COMM_WORLD); /* the sender's step ends first */
  free(r);
}

/* What rank 0's sends use: an extra chunk's send (more sent than received)
 * stays in flight until the communicator closes, and reads its buffer and
 * writes its words until then, so they outlive the step (whole_chunks). */
typedef struct {
  char* s;
  uint64_t flags[8], release[2], later;
  int error, lerr;
} whole_sends_t;

/* Rank 0's side: sent chunks of WHOLE_CH bytes; once told of the mismatch,
 * the pipeline words of its sends are released if any of them waits for a
 * receive that will not come (extra), and a later send to rank 1 fails at
 * once instead of waiting. */
static void whole_send(ncclComm_t comm, int sent, size_t expected, const char* came, int extra, whole_sends_t* w) {
  w->s = malloc((size_t)sent * WHOLE_CH);
  memset(w->s, 5, (size_t)sent * WHOLE_CH);
  for (int c = 0; c < sent; c++)
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, w->s + (size_t)c * WHOLE_CH, WHOLE_CH,
                             mpn_ucx_stage_tag(comm, 0, 1, 0, c, c == sent - 1), NULL, NULL, &w->flags[c],
                             (uint64_t)c + 1, &w->error, w->release, 2) == ncclSuccess);
  expect_mismatch(comm, expected, came);
  if (extra)
    EXPECT(wait_flags(w->release, 2, UINT64_MAX >> 1) == 0);
  else
    EXPECT(wait_flags(w->flags, 1, 1) == 0 && w->error == 0);
  EXPECT(mpn_ucx_tagged_on(comm, 1, 1, w->s, 8, mpn_ucx_stage_tag(comm, 0, 1, 1, 0, 1), NULL, NULL, &w->later, 1,
                           &w->lerr, NULL, 0) == ncclSuccess);
  EXPECT(wait_flags(&w->later, 1, 1) == 0);
  EXPECT(w->lerr == ncclRemoteError);
  MPI_Barrier(MPI_COMM_WORLD);
}

/*
 * A send and a receive cut into different numbers of chunks, every chunk
 * full-size (rank 0 to rank 1, a communicator of their own): the chunk
 * tags' last bit shows it.  More sent than received: the receiver's last
 * chunk meets one that is not the sender's last ("more came"; before, the
 * receiver finished without an error and the extra chunk waited for a
 * later message).  Fewer: the receiver's chunk meets the sender's last
 * (the bytes are told; before, the receiver waited forever for the rest).
 * Both sides report ncclInvalidUsage.
 */
static void whole_chunks(int sent, int posted) {
  ncclComm_t comm = fresh_comm();
  if (comm == NULL) return;
  int bad = (sent < posted ? sent : posted) - 1;
  size_t expected = (size_t)posted * WHOLE_CH;
  char came[48];
  if (sent > posted)
    snprintf(came, sizeof(came), "more came");
  else
    snprintf(came, sizeof(came), "%zu came", (size_t)sent * WHOLE_CH);
  whole_sends_t sends = {0};
  if (rank == 1)
    whole_recv(comm, posted, bad, expected, came);
  else if (rank == 0)
    whole_send(comm, sent, expected, came, sent > posted, &sends);
  else
    MPI_Barrier(MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD); /* nobody closes endpoints others still use */
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);
  free(sends.s); /* (the close ended the extra chunk's send) */
}

/*
 * A send without pipeline words (a captured group's, ucx/graph.c: the
 * next replay waits for its flag before reusing its staging) still in
 * flight to a peer that found a size mismatch (rank 0 to rank 1, a
 * communicator of their own): the peer takes no more of this rank's
 * messages, so the notice must end the send's wait too, as it releases a
 * lane's sends.  Before, its flag stayed 0 until the endpoint closed, and a
 * stream replaying the graph again waited for it.
 */
static void graph_send_released(void) {
  ncclComm_t comm = fresh_comm();
  if (comm == NULL) return;
  char* big = calloc(1, WHOLE_CH);
  char small[16] = {0};
  uint64_t flag = 0, release[2] = {0, 0}, captured = 0, sent = 0;
  int error = 0, cerr = 0, serr = 0;
  if (rank == 1) {
    EXPECT(mpn_ucx_tagged_on(comm, 0, 0, small, 16, mpn_ucx_stage_tag(comm, 0, 1, 0, 0, 1), NULL, NULL, &flag, 1,
                             &error, release, 2) == ncclSuccess);
    EXPECT(wait_flags(&flag, 1, 1) == 0);
    EXPECT(error == ncclInvalidUsage);
  } else if (rank == 0) {
    /* Never received: rank 1 posts no captured receive. */
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, big, WHOLE_CH, mpn_ucx_graph_tag(comm, 0, 1, 0), NULL, NULL, &captured, 1,
                             &cerr, NULL, 0) == ncclSuccess);
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, small, 8, mpn_ucx_stage_tag(comm, 0, 1, 0, 0, 1), NULL, NULL, &sent, 1, &serr,
                             NULL, 0) == ncclSuccess);
    EXPECT(wait_flags(&sent, 1, 1) == 0);
  }
  expect_mismatch(comm, 16, "8 came");
  if (rank == 0) {
    EXPECT(wait_flags(&captured, 1, 1) == 0);
    EXPECT(__atomic_load_n(&cerr, __ATOMIC_ACQUIRE) == ncclRemoteError);
  }
  MPI_Barrier(MPI_COMM_WORLD); /* nobody closes endpoints others still use */
  EXPECT(ncclCommDestroy(comm) == ncclSuccess);
  free(big);
}

enum { STALL_MS = 200 };

/* Holds the proxy thread (an MPN_UCX_CALL) for STALL_MS; *arg says it began. */
static void proxy_stall(void* arg) {
  __atomic_store_n((int*)arg, 1, __ATOMIC_RELEASE);
  usleep(STALL_MS * 1000);
}

/* Returns once this rank's proxy thread is held (proxy_stall); *stalled
 * says when it ends. */
static void proxy_hold(int* stalling, uint64_t* stalled) {
  mpn_ucx_cmd_t stall = {.kind = MPN_UCX_CALL, .fn = proxy_stall, .arg = stalling, .flag = stalled, .value = 1};
  EXPECT(mpn_ucx_proxy_post(&stall) == ncclSuccess);
  while (!__atomic_load_n(stalling, __ATOMIC_ACQUIRE)) usleep(100);
}

/*
 * The receiving side of a size mismatch (rank 1) destroys (or aborts) its
 * communicator as soon as it reports the mismatch; the sender (rank 0) must
 * still hear of it, and report ncclInvalidUsage with rank 1's text.  Rank
 * 1's endpoint to rank 0 is first made by that receive, and its wire-up
 * needs an answer from rank 0's worker, which only rank 0's proxy drives:
 * rank 0 holds its proxy for STALL_MS from before rank 1 posts, so the
 * notice still waits for the endpoint when rank 1 closes.  Before, the
 * close dropped it and rank 0 never heard (ncclSuccess after 30 s); the
 * close now waits (at most a second, well past STALL_MS) for the notice to
 * reach rank 0.
 */
static void closed_after_mismatch(int abort) {
  ncclComm_t comm = fresh_comm();
  if (comm == NULL) return;
  char small[16] = {0};
  uint64_t flag = 0, release[2] = {0, 0}, sent = 0, stalled = 0;
  int error = 0, serr = 0, stalling = 0;
  if (rank == 0) {
    EXPECT(mpn_ucx_tagged_on(comm, 1, 1, small, 8, mpn_ucx_stage_tag(comm, 0, 1, 0, 0, 1), NULL, NULL, &sent, 1, &serr,
                             NULL, 0) == ncclSuccess);
    EXPECT(wait_flags(&sent, 1, 1) == 0);
    proxy_hold(&stalling, &stalled);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    EXPECT(mpn_ucx_tagged_on(comm, 0, 0, small, 16, mpn_ucx_stage_tag(comm, 0, 1, 0, 0, 1), NULL, NULL, &flag, 1,
                             &error, release, 2) == ncclSuccess);
    expect_mismatch(comm, 16, "8 came");
    EXPECT((abort ? ncclCommAbort(comm) : ncclCommDestroy(comm)) == ncclSuccess);
    comm = NULL;
  } else if (rank == 0) {
    expect_mismatch(comm, 16, "8 came");
    EXPECT(wait_flags(&stalled, 1, 1) == 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm) EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

/*
 * Rank 0 sends a small message to rank 1 on a fresh communicator and
 * destroys it at once; rank 1 posts its receive only after that destroy
 * returned, and must get every byte.  Rank 1 holds its proxy for STALL_MS
 * from before rank 0 sends: rank 0's endpoint, first made by the send,
 * cannot finish its wire-up, which needs an answer from rank 1's worker,
 * so the message is still queued in UCX when rank 0 closes.  Before, the
 * forced close dropped it and rank 1 waited in vain; the destroy now
 * flushes the endpoints it opened first.
 */
static void destroyed_after_send(void) {
  mpn_error_clear(); /* an earlier step's text must not pass for this one's */
  ncclComm_t comm = fresh_comm();
  if (comm == NULL) return;
  enum { BYTES = 64 };
  unsigned char s[BYTES], r[BYTES] = {0};
  for (size_t i = 0; i < BYTES; i++) s[i] = byte_of(0, 1, i, 40);
  uint64_t sent = 0, got = 0, stalled = 0;
  int serr = 0, rerr = 0, stalling = 0;
  if (rank == 1) proxy_hold(&stalling, &stalled);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT(mpn_ucx_host_send(comm, 1, s, BYTES, &sent, 1, &serr) == ncclSuccess);
    EXPECT(ncclCommDestroy(comm) == ncclSuccess);
    comm = NULL;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 1) {
    EXPECT(mpn_ucx_host_recv(comm, 0, r, BYTES, &got, 1, &rerr) == ncclSuccess);
    EXPECT(wait_flags(&got, 1, 1) == 0);
    EXPECT(__atomic_load_n(&rerr, __ATOMIC_ACQUIRE) == ncclSuccess);
    size_t bad = 0;
    for (size_t i = 0; i < BYTES; i++) bad += r[i] != byte_of(0, 1, i, 40);
    if (bad) fprintf(stderr, "[rank 1] destroyed_after_send: %zu of %d bytes wrong\n", bad, (int)BYTES);
    failures += bad != 0;
    EXPECT(wait_flags(&stalled, 1, 1) == 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm) EXPECT(ncclCommDestroy(comm) == ncclSuccess);
}

/* An abort with a large send in flight to a peer that never receives it:
 * the close purges the send, and its completion (an error) has come by the
 * time the abort returns; before, it came later, from the proxy's progress,
 * and wrote into the freed communicator (desk review, valgrind). */
static void abort_in_flight(void) {
  ncclComm_t comm = NULL;
  EXPECT(mpincclCommInitMPI(&comm, MPI_COMM_WORLD, NULL) == ncclSuccess);
  if (comm == NULL) return;
  size_t bytes = (size_t)64 << 20; /* past UCX's eager sizes: a rendezvous */
  char* buf = calloc(bytes, 1);
  uint64_t sent = 0;
  int err = 0;
  if (rank == 0 && nranks > 1) {
    EXPECT(mpn_ucx_host_send(comm, 1, buf, bytes, &sent, 1, &err) == ncclSuccess);
    usleep(200000);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT(ncclCommAbort(comm) == ncclSuccess);
  if (rank == 0 && nranks > 1) {
    EXPECT(__atomic_load_n(&sent, __ATOMIC_ACQUIRE) == 1);
    EXPECT(err == ncclRemoteError);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  free(buf);
}

int main(int argc, char** argv) {
  if (!ucx_host_test_start(&argc, &argv)) return 0;
  whole_chunks(3, 2);
  ucx_host_test_step("whole_chunks(3, 2)");
  whole_chunks(1, 3);
  ucx_host_test_step("whole_chunks(1, 3)");
  graph_send_released();
  ucx_host_test_step("graph_send_released");
  closed_after_mismatch(0);
  ucx_host_test_step("closed_after_mismatch (destroy)");
  closed_after_mismatch(1);
  ucx_host_test_step("closed_after_mismatch (abort)");
  destroyed_after_send();
  ucx_host_test_step("destroyed_after_send");
  abort_in_flight();
  ucx_host_test_step("abort_in_flight");
  return mpi_test_finish(rank, "test_ucx_failures: %d ranks, ", nranks);
}
