/*
 * test_ucx_reports.c - a send that could not be queued for the UCX proxy
 * (src/ucx/reports.c, mpn_ucx_proxy_unsent): its peer's record is handed
 * to the proxy's hooks, unless the communicator's close began; the proxy's
 * steps (the drop of a closing owner's records, a round's hooks) are
 * called here in the order the test needs, no proxy thread running.
 */
#include <check.h>

#include "run_suite.h"
#include "ucx/reports.h"

static int found_runs;

static void found_count(mpn_ucx_mismatch_t* m) {
  (void)m;
  found_runs++;
}

/* A communicator of the test's, its peer, and a send to that peer that the
 * proxy's post refused (as net.c's tagged_op makes it). */
typedef struct {
  int closing;
  mpn_ucx_mismatch_t record;
  mpn_ucx_peer_t peer;
  mpn_ucx_cmd_t send;
} comm_t;

static void comm_init(comm_t* c) {
  *c = (comm_t){0};
  c->record.found = found_count; /* (copied into the peer's record when it is filled) */
  c->send = (mpn_ucx_cmd_t){.kind = MPN_UCX_SEND,
                            .owner = c,
                            .peer = &c->peer,
                            .bytes = 64,
                            .tag = 7,
                            .mismatch = &c->record,
                            .closing = &c->closing,
                            .from = 1};
}

/* The peer is told once, from the proxy's next round. */
START_TEST(unsent_told) {
  static comm_t c;
  comm_init(&c);
  found_runs = 0;
  mpn_ucx_proxy_unsent(&c.send);
  mpn_ucx_proxy_unsent(&c.send); /* (claimed already) */
  ck_assert_int_eq(c.peer.report.failed_here, 1);
  ck_assert_int_eq(c.peer.report.failed_send, 1);
  mpn_ucx_report_run();
  ck_assert_int_eq(found_runs, 1);
  ck_assert_int_eq(mpn_ucx_report_refused(&c.send), 1);
}
END_TEST

/* Pushed before the close's drop: the drop takes it, and its hook never runs. */
START_TEST(unsent_before_close_dropped) {
  static comm_t c;
  comm_init(&c);
  found_runs = 0;
  mpn_ucx_proxy_unsent(&c.send);
  c.closing = 1;
  mpn_ucx_report_drop(&c);
  mpn_ucx_report_run();
  ck_assert_int_eq(found_runs, 0);
}
END_TEST

/* The send's thread comes after another thread's close had the proxy drop
 * the communicator's records (ncclCommAbort beside a send that failed for
 * lack of memory): the record must not be handed over, as the close frees
 * it next (found in review: before, it was listed after the drop and its
 * hook ran on the freed communicator). */
START_TEST(unsent_after_close_not_listed) {
  static comm_t c;
  comm_init(&c);
  found_runs = 0;
  c.closing = 1; /* (the closer's first step) */
  mpn_ucx_report_drop(&c);
  mpn_ucx_proxy_unsent(&c.send);
  mpn_ucx_report_run();
  ck_assert_msg(found_runs == 0, "the hook of a closed communicator's record ran %d time(s)", found_runs);
}
END_TEST

int main(void) {
  Suite* s = suite_create("ucx_reports");
  TCase* tc = tcase_create("ucx_reports");
  tcase_add_test(tc, unsent_told);
  tcase_add_test(tc, unsent_before_close_dropped);
  tcase_add_test(tc, unsent_after_close_not_listed);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
