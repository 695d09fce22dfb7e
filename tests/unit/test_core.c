/*
 * test_core.c - unit tests of what needs neither MPI nor a GPU: the ABI facts
 * of nccl.h, version, error strings, ncclConfig_t reading, parameters,
 * logging options, the functions this version refuses, the order rules
 * of the flag kernel's table, how a peer's process is found gone, and the
 * clock of the library's deadlines.
 */
#define _GNU_SOURCE /* pthread_cond_clockwait */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/config.h"
#include "core/debug.h"
#include "core/param.h"
#include "core/proc.h"
#include "cuda/sync.h"
#include "mpinccl.h"
#include "p2p/eager.h"
#include "p2p/order.h"
#include "p2p/pair.h"
#include "refusal.h"
#include "run_suite.h"

START_TEST(abi_layout) {
  ck_assert_int_eq(sizeof(ncclUniqueId), 128);
  ck_assert_int_eq(NCCL_UNIQUE_ID_BYTES, 128);
  ck_assert_int_eq(ncclNumResults, 9);
  ck_assert_int_eq(ncclTimeout, 8);
  ck_assert_int_eq(ncclInProgress, 7);
  ck_assert_int_eq(ncclFloat8e5m2, 11);
  ck_assert_int_eq(ncclNumTypes, 12);
  ck_assert_int_eq(ncclBfloat16, 9);
  ck_assert_int_eq(ncclAvg, 4);
  ck_assert_int_eq(sizeof(ncclRedOp_t), sizeof(ncclRedOp_dummy_t));
  ck_assert_int_eq((int)ncclMaxRedOp, 0x7fffffff >> (32 - 8 * (int)sizeof(ncclRedOp_dummy_t)));
  ck_assert_int_eq(offsetof(ncclConfig_t, size), 0);
  ck_assert_int_eq(offsetof(ncclConfig_t, magic), 8);
  ck_assert_int_eq(offsetof(ncclConfig_t, version), 12);
  ck_assert_int_eq(offsetof(ncclConfig_t, blocking), 16);
  ck_assert_int_eq(offsetof(ncclConfig_t, netName), 32);
  ck_assert_int_eq(offsetof(ncclConfig_t, commName), 48);
  ck_assert_int_eq(offsetof(ncclConfig_t, numRmaCtx), 84);
  ck_assert_int_eq(offsetof(ncclConfig_t, graphStreamOrdering), 92);
  ck_assert_int_eq(offsetof(ncclWaitSignalDesc_t, ctx), 12);
  ck_assert_int_eq(NCCL_WIN_REQUIRED_ALIGNMENT, 4096);
  ck_assert_int_eq(NCCL_SPLIT_NOCOLOR, -1);
  ck_assert_uint_eq(NCCL_API_MAGIC, 0xcafebeefu);
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ck_assert_uint_eq(c.size, sizeof(ncclConfig_t));
  ck_assert_int_eq(c.blocking, NCCL_CONFIG_UNDEF_INT);
  ck_assert_int_eq(c.graphStreamOrdering, NCCL_CONFIG_UNDEF_INT);
  ck_assert_ptr_null(c.commName);
  ck_assert_int_ne(MPINCCL_PROC_NULL, -1);
}
END_TEST

START_TEST(version_codes) {
  int v = 0;
  ck_assert_int_eq(ncclGetVersion(&v), ncclSuccess);
  ck_assert_int_eq(v, NCCL_VERSION_CODE);
  ck_assert_int_eq(NCCL_VERSION(2, 30, 7), 23007);
  ck_assert_int_eq(NCCL_VERSION(2, 8, 4), 2804);
  ck_assert_int_eq(NCCL_VERSION_CODE / 100, 230);
  ck_assert_int_eq(pncclGetVersion(&v), ncclSuccess);
  ck_assert_int_eq(ncclGetVersion(NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "version is NULL"));
}
END_TEST

START_TEST(error_strings) {
  for (int i = 0; i < ncclNumResults; i++) {
    const char* s = ncclGetErrorString((ncclResult_t)i);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_gt(strlen(s), 5);
    for (int j = 0; j < i; j++) ck_assert_str_ne(s, ncclGetErrorString((ncclResult_t)j));
  }
  ck_assert_str_eq(ncclGetErrorString((ncclResult_t)42), "unknown result code");
  ck_assert_str_eq(ncclGetErrorString((ncclResult_t)-1), "unknown result code");
}
END_TEST

START_TEST(config_defaults_and_magic) {
  mpn_config_t cfg;
  ck_assert_int_eq(mpn_config_read(NULL, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.blocking, 1);
  ck_assert_int_eq(cfg.num_rma_ctx, 1);
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = 0;
  c.numRmaCtx = 4;
  c.commName = "halo";
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.blocking, 0);
  ck_assert_int_eq(cfg.num_rma_ctx, 4);
  ck_assert_str_eq(cfg.name, "halo");
  c.magic = 0x1234;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "ncclCommInitRankConfig", &cfg), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "config->magic 0x1234"));
  c = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  c.blocking = 2;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "blocking 2"));
  c.blocking = NCCL_CONFIG_UNDEF_INT;
  /* numRmaCtx as NCCL 2.30's parseCommConfig: 0 accepted (no one-sided
   * operations), negative refused; above our 64 refused (NCCL has no bound). */
  c.numRmaCtx = 0;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.num_rma_ctx, 0);
  c.numRmaCtx = 64;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.num_rma_ctx, 64);
  c.numRmaCtx = -1;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "ncclCommInitRankConfig", &cfg), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclCommInitRankConfig: config->numRmaCtx -1 is negative"));
  c.numRmaCtx = 65;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "config->numRmaCtx 65 is above the 64"));
}
END_TEST

/* NCCL_NUM_RMA_CTX, as NCCL's environment override of config->numRmaCtx:
 * 0 or more takes the config's (and a split's inherited) place, a negative
 * value changes nothing, above our 64 creation is refused naming it. */
START_TEST(config_rma_ctx_env) {
  mpn_config_t parent = {.blocking = 1, .num_rma_ctx = 7}, cfg;
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER, big = NCCL_CONFIG_INITIALIZER;
  c.numRmaCtx = 5;
  big.numRmaCtx = 100; /* above our bound, which NCCL does not have: fine when the variable replaces it */
  static const struct {
    const char* env;     /* NULL: unset */
    int user, split, ok; /* the counts taken with a config of 5 and for a split of a parent of 7 */
  } cases[] = {{"3", 3, 3, 1}, {"0", 0, 0, 1}, {"-2", 5, 7, 1}, {"65", 0, 0, 0}, {NULL, 5, 7, 1}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (cases[i].env)
      setenv("NCCL_NUM_RMA_CTX", cases[i].env, 1);
    else
      unsetenv("NCCL_NUM_RMA_CTX");
    ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
    mpn_config_t user, split;
    ncclResult_t a = mpn_config_read(&c, NULL, "ncclCommInitRankConfig", &user);
    ncclResult_t b = mpn_config_read(NULL, &parent, "ncclCommSplit", &split);
    if (!cases[i].ok) {
      ck_assert_int_eq(a, ncclInvalidArgument);
      ck_assert_int_eq(b, ncclInvalidArgument);
      ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclCommSplit: NCCL_NUM_RMA_CTX=65 is above the 64"));
      continue;
    }
    ck_assert_int_eq(a, ncclSuccess);
    ck_assert_int_eq(b, ncclSuccess);
    ck_assert_int_eq(user.num_rma_ctx, cases[i].user);
    ck_assert_int_eq(split.num_rma_ctx, cases[i].split);
    ck_assert_int_eq(mpn_config_read(&big, NULL, "ncclCommInitRankConfig", &cfg),
                     atoi(cases[i].env ? cases[i].env : "-1") >= 0 ? ncclSuccess : ncclInvalidArgument);
  }
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "config->numRmaCtx 100 is above the 64"));
}
END_TEST

/* Fields we ignore are still refused out of range, as NCCL refuses them,
 * naming the field and the value. */
START_TEST(config_field_ranges) {
  mpn_config_t cfg;
  const struct {
    size_t offset;
    int value;
    const char* text;
  } bad[] = {
      {offsetof(ncclConfig_t, cgaClusterSize), -1, "config->cgaClusterSize -1"},
      {offsetof(ncclConfig_t, minCTAs), 0, "config->minCTAs 0"},
      {offsetof(ncclConfig_t, maxCTAs), -3, "config->maxCTAs -3"},
      {offsetof(ncclConfig_t, splitShare), 5, "config->splitShare 5"},
      {offsetof(ncclConfig_t, collnetEnable), 2, "config->collnetEnable 2"},
      {offsetof(ncclConfig_t, CTAPolicy), 0x40, "config->CTAPolicy 64"},
      {offsetof(ncclConfig_t, shrinkShare), -1, "config->shrinkShare -1"},
      {offsetof(ncclConfig_t, nvlsCTAs), 0, "config->nvlsCTAs 0"},
      {offsetof(ncclConfig_t, nChannelsPerNetPeer), -2, "config->nChannelsPerNetPeer -2"},
      {offsetof(ncclConfig_t, nvlinkCentricSched), 7, "config->nvlinkCentricSched 7"},
      {offsetof(ncclConfig_t, graphUsageMode), 3, "config->graphUsageMode 3"},
      {offsetof(ncclConfig_t, maxP2pPeers), -1, "config->maxP2pPeers -1"},
      {offsetof(ncclConfig_t, graphStreamOrdering), 2, "config->graphStreamOrdering 2"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    c.version = NCCL_VERSION(2, 30, 7); /* every field read (graphStreamOrdering: 2.30.5) */
    memcpy((char*)&c + bad[i].offset, &bad[i].value, sizeof(int));
    ck_assert_msg(mpn_config_read(&c, NULL, "t", &cfg) == ncclInvalidArgument, "%s accepted", bad[i].text);
    ck_assert_msg(strstr(ncclGetLastError(NULL), bad[i].text) != NULL, "%s: \"%s\"", bad[i].text,
                  ncclGetLastError(NULL));
  }
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.minCTAs = 8;
  c.maxCTAs = 4;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "minCTAs 8 is above config->maxCTAs 4"));
  /* Values in range are accepted, and a field newer than the caller's
   * version is not read. */
  c.minCTAs = 1;
  c.maxCTAs = 32;
  c.splitShare = 1;
  c.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  c.graphUsageMode = 2;
  c.maxP2pPeers = 8;
  c.graphStreamOrdering = 0;
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclSuccess);
  c.version = NCCL_VERSION(2, 26, 0);
  c.collnetEnable = 9; /* arrived in 2.27 */
  ck_assert_int_eq(mpn_config_read(&c, NULL, "t", &cfg), ncclSuccess);
}
END_TEST

/* A program built against an older header passes a shorter struct. */
START_TEST(config_older_header) {
  mpn_config_t cfg;
  unsigned char raw[sizeof(ncclConfig_t)];
  memset(raw, 0x5a, sizeof(raw)); /* garbage beyond the old size */
  ncclConfig_t* c = (ncclConfig_t*)raw;
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  size_t old_size = offsetof(ncclConfig_t, numRmaCtx); /* before numRmaCtx existed */
  memcpy(raw, &init, old_size);
  c->size = old_size;
  c->version = NCCL_VERSION(2, 27, 0);
  c->blocking = 0;
  ck_assert_int_eq(mpn_config_read(c, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.blocking, 0);
  ck_assert_int_eq(cfg.num_rma_ctx, 1); /* garbage past size ignored */
  /* 2.29 struct with the full size but an older version: 2.30 fields unset. */
  ncclConfig_t d = NCCL_CONFIG_INITIALIZER;
  d.version = NCCL_VERSION(2, 29, 0);
  d.maxP2pPeers = 7;
  ck_assert_int_eq(mpn_config_read(&d, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.max_p2p_peers, 0);
  d.version = NCCL_VERSION(2, 30, 0);
  ck_assert_int_eq(mpn_config_read(&d, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.max_p2p_peers, 7);
  /* numRmaCtx arrived in 2.29: an older version's is not read. */
  d.numRmaCtx = -7;
  d.version = NCCL_VERSION(2, 28, 0);
  ck_assert_int_eq(mpn_config_read(&d, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.num_rma_ctx, 1);
  d.version = NCCL_VERSION(2, 29, 0);
  ck_assert_int_eq(mpn_config_read(&d, NULL, "t", &cfg), ncclInvalidArgument);
  d.numRmaCtx = 2;
  ck_assert_int_eq(mpn_config_read(&d, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.num_rma_ctx, 2);
  d.numRmaCtx = NCCL_CONFIG_UNDEF_INT;
  /* graphStreamOrdering arrived in 2.30.5 (NCCL's parseCommConfig resets it
   * below that version).  A 2.30.0-2.30.4 header's struct ends with
   * maxP2pPeers, and its size is the same (padded to 8 bytes): the last 4
   * bytes are padding, whatever the stack held, never a value to refuse. */
  ck_assert_uint_eq(offsetof(ncclConfig_t, graphStreamOrdering) + sizeof(int), sizeof(ncclConfig_t));
  ck_assert_uint_eq((offsetof(ncclConfig_t, maxP2pPeers) + sizeof(int) + 7) / 8 * 8, sizeof(ncclConfig_t));
  memset(&d.graphStreamOrdering, 0x5a, sizeof(int));
  d.version = NCCL_VERSION(2, 30, 3);
  ck_assert_msg(mpn_config_read(&d, NULL, "t", &cfg) == ncclSuccess, "a 2.30.3 config refused: \"%s\"",
                ncclGetLastError(NULL));
  ck_assert_int_eq(cfg.graph_stream_ordering, 0);
  d.version = NCCL_VERSION(2, 30, 7);
  d.graphStreamOrdering = 1;
  ck_assert_int_eq(mpn_config_read(&d, NULL, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.graph_stream_ordering, 1);
  /* This header's own config holds the field: it is read and checked. */
  ncclConfig_t own = NCCL_CONFIG_INITIALIZER;
  own.graphStreamOrdering = 7;
  ck_assert_int_eq(mpn_config_read(&own, NULL, "t", &cfg), ncclInvalidArgument);
  ck_assert(strstr(ncclGetLastError(NULL), "graphStreamOrdering 7") != NULL);
}
END_TEST

START_TEST(config_inherits_parent) {
  mpn_config_t parent = {.blocking = 0, .num_rma_ctx = 3}, cfg;
  ck_assert_int_eq(mpn_config_read(NULL, &parent, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.blocking, 0);
  ck_assert_int_eq(cfg.num_rma_ctx, 3);
  /* With a config, what it leaves unset takes the defaults (NCCL's split). */
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.commName = "child";
  ck_assert_int_eq(mpn_config_read(&c, &parent, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.blocking, 1);
  ck_assert_int_eq(cfg.num_rma_ctx, 1);
  c.numRmaCtx = 2;
  ck_assert_int_eq(mpn_config_read(&c, &parent, "t", &cfg), ncclSuccess);
  ck_assert_int_eq(cfg.num_rma_ctx, 2);
}
END_TEST

START_TEST(params_table) {
  unsetenv("MPINCCL_TRANSPORT");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  ck_assert_str_eq(mpn_param_str(MPN_PARAM_TRANSPORT), "auto");
  ck_assert_int_eq(mpn_param_is_set(MPN_PARAM_TRANSPORT), 0);
  ck_assert_int_eq(mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT), 120);
  setenv("MPINCCL_TRANSPORT", "UCX", 1);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "7", 1);
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  ck_assert_str_eq(mpn_param_str(MPN_PARAM_TRANSPORT), "UCX");
  ck_assert_int_eq(mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT), 7);
  setenv("MPINCCL_TRANSPORT", "carrier-pigeon", 1);
  ck_assert_int_eq(mpn_params_reload(), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "MPINCCL_TRANSPORT=carrier-pigeon"));
  unsetenv("MPINCCL_TRANSPORT");
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "0x", 1);
  ck_assert_int_eq(mpn_params_reload(), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "MPINCCL_BOOTSTRAP_TIMEOUT=0x"));
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "0", 1); /* below the minimum */
  ck_assert_int_eq(mpn_params_reload(), ncclInvalidArgument);
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  /* A NCCL_DEBUG of no known level is ignored, as NCCL does (the log warns
   * and uses WARN), not refused. */
  setenv("NCCL_DEBUG", "junk", 1);
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  ck_assert_str_eq(mpn_param_str(MPN_PARAM_DEBUG), "NONE");
  setenv("MPINCCL_TRANSPORT", "carrier-pigeon", 1); /* the others still count */
  ck_assert_int_eq(mpn_params_reload(), ncclInvalidArgument);
  unsetenv("MPINCCL_TRANSPORT");
  unsetenv("NCCL_DEBUG");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  /* Blanks around a value are left out, on both sides. */
  setenv("MPINCCL_TRANSPORT", " ucx ", 1);
  setenv("MPINCCL_BOOTSTRAP_TIMEOUT", "5 ", 1);
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  ck_assert_str_eq(mpn_param_str(MPN_PARAM_TRANSPORT), "ucx");
  ck_assert_int_eq(mpn_param_int(MPN_PARAM_BOOTSTRAP_TIMEOUT), 5);
  unsetenv("MPINCCL_TRANSPORT");
  unsetenv("MPINCCL_BOOTSTRAP_TIMEOUT");
  /* NCCL_P2P_DISABLE as NCCL reads it: 1 disables, anything else does not. */
  const char* p2p[][2] = {{"1", "1"}, {"0x1", "1"}, {"2", "0"}, {"true", "0"}, {"0", "0"}};
  for (size_t i = 0; i < sizeof(p2p) / sizeof(p2p[0]); i++) {
    setenv("NCCL_P2P_DISABLE", p2p[i][0], 1);
    ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
    ck_assert_int_eq(mpn_param_int(MPN_PARAM_P2P_DISABLE), atoi(p2p[i][1]));
  }
  unsetenv("NCCL_P2P_DISABLE");
  ck_assert_int_eq(mpn_params_reload(), ncclSuccess);
  /* Every row documented. */
  for (int i = 0; i < MPN_PARAM_COUNT; i++) {
    ck_assert_ptr_nonnull(mpn_param_table[i].name);
    ck_assert_int_gt(strlen(mpn_param_table[i].help), 10);
  }
}
END_TEST

/* The inbox parameters (core, which knows no p2p header) end where the
 * inbox's slots do (p2p/eager.h): a larger value would overrun a slot. */
START_TEST(eager_param_bounds) {
  const mpn_param_desc_t* small = &mpn_param_table[MPN_PARAM_EAGER_MAX];
  const mpn_param_desc_t* big = &mpn_param_table[MPN_PARAM_EAGER_BIG_MAX];
  ck_assert_int_eq(small->max, MPN_EAGER_SLOT_BYTES);
  ck_assert_int_le(atoll(small->deflt), MPN_EAGER_SLOT_BYTES);
  ck_assert_int_eq(big->max, MPN_EAGER_BIG_BYTES);
  ck_assert_int_le(atoll(big->deflt), MPN_EAGER_BIG_BYTES);
}
END_TEST

/* The README's parameter table is the one the code prints. */
START_TEST(readme_parameters) {
  char path[512];
  const char* here = __FILE__;
  const char* slash = strrchr(here, '/');
  snprintf(path, sizeof(path), "%.*s/../../README.md", (int)(slash ? slash - here : 1),
           slash ? here : ".");
  FILE* f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s", path);
  static char readme[1 << 16];
  size_t n = fread(readme, 1, sizeof(readme) - 1, f);
  fclose(f);
  readme[n] = '\0';
  char* table = NULL;
  size_t len = 0;
  FILE* out = open_memstream(&table, &len);
  mpn_params_print_markdown(out);
  fclose(out);
  /* Name the first row that differs (the whole table is too long for a message). */
  if (strstr(readme, table) == NULL) {
    for (char* row = strtok(table, "\n"); row; row = strtok(NULL, "\n"))
      ck_assert_msg(strstr(readme, row) != NULL, "README.md lacks this row of the parameter table:\n%s", row);
    ck_abort_msg("README.md has every row of the parameter table, but not in this order");
  }
  free(table);
}
END_TEST

START_TEST(debug_options) {
  ck_assert_int_eq(mpn_log_parse_level("INFO"), MPN_LOG_INFO);
  ck_assert_int_eq(mpn_log_parse_level("trace"), MPN_LOG_TRACE);
  ck_assert_int_eq(mpn_log_parse_level("WARN"), MPN_LOG_WARN);
  ck_assert_int_eq(mpn_log_parse_level(""), MPN_LOG_NONE);
  ck_assert_int_eq(mpn_log_parse_level("LOUD"), -1);
  ck_assert_uint_eq(mpn_log_parse_subsys("INIT,P2P"), MPN_SUBSYS_INIT | MPN_SUBSYS_P2P);
  ck_assert_uint_eq(mpn_log_parse_subsys("ALL"), MPN_SUBSYS_ALL);
  ck_assert_uint_eq(mpn_log_parse_subsys("^NET"), ~(unsigned)MPN_SUBSYS_NET);
}
END_TEST

/* Reads the first line of a log file into line; returns 0 if there is none. */
static int first_log_line(const char* file, char* line, int size) {
  FILE* f = fopen(file, "r");
  if (f == NULL) return 0;
  line[0] = '\0';
  int got = fgets(line, size, f) != NULL;
  fclose(f);
  return got;
}

/* Logging to a file names the file after host and pid, and writes INFO lines;
 * ncclResetDebugInit makes the settings count even where an earlier test of
 * the same process (CK_FORK=no) logged already. */
START_TEST(debug_file) {
  char path[] = "/tmp/mpinccl-log-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(path));
  char pattern[256];
  snprintf(pattern, sizeof(pattern), "%s/log.%%p", path);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  ncclResetDebugInit();
  MPN_INFO(MPN_SUBSYS_INIT, "hello %d", 42);
  char file[300], line[512];
  snprintf(file, sizeof(file), "%s/log.%d", path, (int)getpid());
  ck_assert_int_eq(first_log_line(file, line, sizeof(line)), 1);
  ck_assert_ptr_nonnull(strstr(line, "MPINCCL INFO hello 42"));
  unlink(file);
  rmdir(path);
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv("NCCL_DEBUG");
  ncclResetDebugInit();
}
END_TEST

/* ncclResetDebugInit: the level, the subsystems and the file are read again,
 * and the file opened before is closed (its last line written). */
START_TEST(debug_reset) {
  char path[] = "/tmp/mpinccl-log-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(path));
  char first[300], second[300], line[512];
  snprintf(first, sizeof(first), "%s/first", path);
  snprintf(second, sizeof(second), "%s/second", path);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT", 1);
  setenv("NCCL_DEBUG_FILE", first, 1);
  ncclResetDebugInit();
  ck_assert(!mpn_log_enabled(MPN_LOG_INFO, MPN_SUBSYS_INIT));
  MPN_WARN("first %d", 1);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "P2P", 1);
  setenv("NCCL_DEBUG_FILE", second, 1);
  ck_assert(!mpn_log_enabled(MPN_LOG_INFO, MPN_SUBSYS_P2P)); /* not read again yet */
  ncclResetDebugInit();
  ck_assert(mpn_log_enabled(MPN_LOG_INFO, MPN_SUBSYS_P2P));
  ck_assert(!mpn_log_enabled(MPN_LOG_INFO, MPN_SUBSYS_INIT));
  MPN_INFO(MPN_SUBSYS_P2P, "second %d", 2);
  ck_assert_int_eq(first_log_line(first, line, sizeof(line)), 1);
  ck_assert_ptr_nonnull(strstr(line, "MPINCCL WARN first 1"));
  ck_assert_int_eq(first_log_line(second, line, sizeof(line)), 1);
  ck_assert_ptr_nonnull(strstr(line, "MPINCCL INFO second 2"));
  unsetenv("NCCL_DEBUG_FILE");
  unsetenv("NCCL_DEBUG_SUBSYS");
  unsetenv("NCCL_DEBUG");
  ncclResetDebugInit();
  ck_assert(!mpn_log_enabled(MPN_LOG_WARN, MPN_SUBSYS_ALL));
  unlink(first);
  unlink(second);
  rmdir(path);
}
END_TEST

/* Each names itself in the text: the call and why it is refused. */
#define NOT_PROVIDED(call) REFUSED(NULL, call, ncclInvalidUsage, "not available in this version of mpinccl")

START_TEST(refused_calls) {
  ncclComm_t comm = NULL;
  ncclUniqueId id;
  uint64_t value;
  void* p = NULL;
  NOT_PROVIDED(ncclCommShrink(comm, NULL, 0, &comm, NULL, 0));
  NOT_PROVIDED(ncclCommGrow(comm, 2, &id, 0, &comm, NULL));
  NOT_PROVIDED(ncclCommInitRankScalable(&comm, 2, 0, 1, &id, NULL));
  NOT_PROVIDED(ncclCommGetUniqueId(comm, &id));
  NOT_PROVIDED(ncclCommRevoke(comm, 0));
  NOT_PROVIDED(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  NOT_PROVIDED(ncclCommResume(comm));
  NOT_PROVIDED(ncclCommMemStats(comm, ncclStatGpuMemTotal, &value));
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NOT_PROVIDED(ncclGroupSimulateEnd(&sim));
  NOT_PROVIDED(ncclAllReduce(p, p, 1, ncclFloat, ncclSum, comm, NULL));
  NOT_PROVIDED(ncclReduce(p, p, 1, ncclFloat, ncclSum, 0, comm, NULL));
  NOT_PROVIDED(ncclBcast(p, 1, ncclFloat, 0, comm, NULL));
  NOT_PROVIDED(ncclBroadcast(p, p, 1, ncclFloat, 0, comm, NULL));
  NOT_PROVIDED(ncclReduceScatter(p, p, 1, ncclFloat, ncclSum, comm, NULL));
  NOT_PROVIDED(ncclAllGather(p, p, 1, ncclFloat, comm, NULL));
  NOT_PROVIDED(ncclAlltoAll(p, p, 1, ncclFloat, comm, NULL));
  NOT_PROVIDED(ncclGather(p, p, 1, ncclFloat, 0, comm, NULL));
  NOT_PROVIDED(ncclScatter(p, p, 1, ncclFloat, 0, comm, NULL));
  ncclRedOp_t op;
  float s = 1;
  NOT_PROVIDED(ncclRedOpCreatePreMulSum(&op, &s, ncclFloat, ncclScalarHostImmediate, comm));
  NOT_PROVIDED(ncclRedOpDestroy(ncclSum, comm));
  REFUSED(NULL, ncclMemAlloc(NULL, 4096), ncclInvalidArgument, "ptr is NULL");
  REFUSED(NULL, ncclMemAlloc(&p, 0), ncclInvalidArgument, "size is 0");
  REFUSED(NULL, ncclMemAlloc(&p, SIZE_MAX), ncclInvalidArgument, "size 18446744073709551615 is too large");
  ck_assert_int_eq(ncclMemFree(NULL), ncclSuccess); /* as NCCL's */
  REFUSED(NULL, ncclMemFree((void*)(uintptr_t)1), ncclInvalidArgument, "0x1 was not allocated by ncclMemAlloc");
  REFUSED(NULL, ncclGroupEnd(), ncclInvalidUsage, "no ncclGroupStart is open");
  /* Refused inside a group: the group fails as a whole; and
   * ncclGroupSimulateEnd ends the level it opened, as NCCL's. */
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(p, p, 1, ncclFloat, ncclSum, comm, NULL), ncclInvalidUsage);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclAllReduce"));
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclGroupSimulateEnd(&sim), ncclInvalidUsage);
  REFUSED(NULL, ncclGroupEnd(), ncclInvalidUsage, "no ncclGroupStart is open");
}
END_TEST

/* Messages 512 apart share a slot: a message must wait for the slot's
 * previous one only when the two came from different streams (docs/P2P.md,
 * known problem 5); a side seen on one stream keeps no table. */
START_TEST(slot_streams) {
  enum { A = 11, B = 22 };
  mpn_slot_streams_t s = {0, 0, NULL};
  uint64_t seq = 0;
  for (int k = 0; k < 3 * MPN_PAIR_SLOTS; k++) ck_assert_int_eq(mpn_slot_streams_note(&s, ++seq, A), 0);
  ck_assert_ptr_null(s.table);
  /* Now MPN_PAIR_SLOTS messages from B: each follows one from A. */
  for (int k = 0; k < MPN_PAIR_SLOTS; k++) ck_assert_int_eq(mpn_slot_streams_note(&s, ++seq, B), 1);
  ck_assert_ptr_nonnull(s.table);
  /* B again: the slots' previous messages were B's. */
  for (int k = 0; k < MPN_PAIR_SLOTS; k++) ck_assert_int_eq(mpn_slot_streams_note(&s, ++seq, B), 0);
  /* Alternating per message: slot n's previous message is n - 512, of the same parity. */
  for (int k = 0; k < MPN_PAIR_SLOTS; k++) ck_assert_int_eq(mpn_slot_streams_note(&s, ++seq, k % 2 ? A : B), k % 2);
  for (int k = 0; k < MPN_PAIR_SLOTS; k++) ck_assert_int_eq(mpn_slot_streams_note(&s, ++seq, k % 2 ? A : B), 0);
  mpn_slot_streams_free(&s);
  ck_assert_ptr_null(s.table);
  /* A second stream before the ring wrapped: nothing to wait for yet. */
  ck_assert_int_eq(mpn_slot_streams_note(&s, 1, A), 0);
  ck_assert_int_eq(mpn_slot_streams_note(&s, 2, B), 0);
  ck_assert_int_eq(mpn_slot_streams_note(&s, 1 + MPN_PAIR_SLOTS, B), 1);
  ck_assert_int_eq(mpn_slot_streams_note(&s, 2 + MPN_PAIR_SLOTS, B), 0);
  mpn_slot_streams_free(&s);
}
END_TEST

/* Blocks the flag kernel's copies call for: one per 64 KiB of them, at
 * least one, at most MPN_SYNC_BLOCKS; a new table has one block and no
 * counters. */
START_TEST(sync_blocks_wanted) {
  mpn_sync_t k;
  mpn_sync_init(&k);
  ck_assert_int_eq(k.grid.blocks, 1);
  ck_assert(k.grid.counter == 0 && k.grid.done == 0 && k.grid.epoch == 0);
  ck_assert_int_eq(mpn_sync_blocks_wanted(&k), 1); /* no copies */
  mpn_copy_t c = {NULL, NULL, 0, NULL, NULL};
  ck_assert(mpn_sync_push_copy(&k, 0, c));
  ck_assert_int_eq(mpn_sync_blocks_wanted(&k), 1); /* a copy of 0 bytes */
  k.copies[0].bytes = MPN_SYNC_BLOCK_BYTES;
  ck_assert_int_eq(mpn_sync_blocks_wanted(&k), 1);
  k.copies[0].bytes = MPN_SYNC_BLOCK_BYTES + 1;
  ck_assert_int_eq(mpn_sync_blocks_wanted(&k), 2);
  c.bytes = 3 * MPN_SYNC_BLOCK_BYTES; /* the blocks count the bytes of every round */
  ck_assert(mpn_sync_push_copy(&k, 1, c));
  ck_assert_int_eq(mpn_sync_blocks_wanted(&k), 5);
  k.copies[1].bytes = (size_t)1 << 30;
  ck_assert_int_eq(mpn_sync_blocks_wanted(&k), MPN_SYNC_BLOCKS);
}
END_TEST

/* The flag kernel's table keeps its parts in order (first writes, then each
 * round's waits and writes) and refuses what would go before an entry
 * already there, or past its capacity. */
START_TEST(sync_table_order) {
  mpn_sync_t k;
  mpn_sync_init(&k);
  mpn_sync_flag_t f = {0x1000, 1, 0, 0};
  ck_assert(mpn_sync_push(&k, 0, MPN_SYNC_FIRST, f));
  ck_assert(mpn_sync_push(&k, 0, MPN_SYNC_WAIT, f));
  ck_assert(mpn_sync_push(&k, 0, MPN_SYNC_WAIT, f));
  ck_assert(!mpn_sync_push(&k, 0, MPN_SYNC_FIRST, f)); /* a first write after a wait */
  ck_assert(mpn_sync_push(&k, 0, MPN_SYNC_LAST, f));
  ck_assert(!mpn_sync_push(&k, 0, MPN_SYNC_WAIT, f)); /* a wait after round 0's writes */
  ck_assert(mpn_sync_push(&k, 1, MPN_SYNC_WAIT, f));
  ck_assert(!mpn_sync_push(&k, 0, MPN_SYNC_LAST, f)); /* round 0 after round 1 */
  ck_assert(mpn_sync_push(&k, 1, MPN_SYNC_LAST, f));
  ck_assert_int_eq(k.nfirst, 1);
  /* A second count for the same counter raises the first write, never lowers it. */
  ck_assert(mpn_sync_raise(&k, 0x1000, 5));
  ck_assert(mpn_sync_raise(&k, 0x1000, 3));
  ck_assert_int_eq(k.flags[0].value, 5);
  ck_assert(!mpn_sync_raise(&k, 0x2000, 5)); /* no first write there */
  ck_assert_int_eq(k.nfirst, 1);
  ck_assert_int_eq(k.nwait[0], 2);
  ck_assert_int_eq(k.nlast[0], 1);
  ck_assert_int_eq(k.nwait[1], 1);
  ck_assert_int_eq(k.nlast[1], 1);
  ck_assert_int_eq(mpn_sync_nflags(&k), 6);
  mpn_copy_t c = {NULL, NULL, 8, NULL, NULL};
  ck_assert(mpn_sync_push_copy(&k, 0, c));
  ck_assert(mpn_sync_push_copy(&k, 1, c));
  ck_assert(!mpn_sync_push_copy(&k, 0, c)); /* round 0's copy after round 1's */
  ck_assert_int_eq(mpn_sync_ncopies(&k), 2);
  while (mpn_sync_push(&k, 1, MPN_SYNC_LAST, f)) {
  }
  ck_assert_int_eq(mpn_sync_nflags(&k), MPN_SYNC_FLAGS);
  while (mpn_sync_push_copy(&k, 1, c)) {
  }
  ck_assert_int_eq(mpn_sync_ncopies(&k), MPN_SYNC_COPIES);
}
END_TEST

/* The state letter of process pid in /proc/<pid>/stat (after the command
 * name's last ')'), or 0 when unreadable. */
static char stat_state(pid_t pid) {
  char path[64], line[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(line, 1, sizeof(line) - 1, f);
  fclose(f);
  line[n] = '\0';
  const char* p = strrchr(line, ')');
  return p && p[1] == ' ' ? p[2] : 0;
}

/* This process is alive under its own start time, also when its command
 * name holds spaces and ')', and gone under another one: what a new process
 * given a dead peer's pid looks like. */
START_TEST(proc_self_and_reused) {
  uint64_t start = mpn_proc_start_time(getpid());
  ck_assert_uint_ne(start, 0);
  ck_assert_int_eq(mpn_proc_gone(getpid(), start), 0);
  ck_assert_int_eq(mpn_proc_gone(getpid(), 0), 0); /* start time unknown */
  ck_assert_int_eq(mpn_proc_gone(getpid(), start + 1), 1);
  char name[17] = {0};
  ck_assert_int_eq(prctl(PR_GET_NAME, name), 0);
  ck_assert_int_eq(prctl(PR_SET_NAME, "a) b (c) 1 2"), 0);
  uint64_t again = mpn_proc_start_time(getpid());
  ck_assert_int_eq(prctl(PR_SET_NAME, name), 0);
  ck_assert_uint_eq(again, start);
}
END_TEST

/* A child that exited and was not reaped still answers kill(pid, 0) but is
 * gone; once reaped, its pid names nobody and it is gone too. */
START_TEST(proc_zombie_and_reaped) {
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) _exit(0);
  uint64_t start = mpn_proc_start_time(child); /* not reaped: its entry stays */
  ck_assert_uint_ne(start, 0);
  for (int i = 0; i < 2000 && stat_state(child) != 'Z'; i++) usleep(1000);
  ck_assert_int_eq(stat_state(child), 'Z');
  ck_assert_int_eq(kill(child, 0), 0); /* what the watchdog alone used to see */
  ck_assert_int_eq(mpn_proc_gone(child, start), 1);
  ck_assert_int_eq(mpn_proc_gone(child, 0), 1);
  int status = -1;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  errno = 0;
  ck_assert_int_eq(kill(child, 0), -1);
  ck_assert_int_eq(errno, ESRCH);
  ck_assert_int_eq(mpn_proc_gone(child, start), 1);
  ck_assert_uint_ne(mpn_proc_start_time(child), start); /* 0, or a new process given the pid */
  ck_assert_int_eq(mpn_proc_gone(0, 0), 0);             /* no pid: never gone */
}
END_TEST

/* Deadlines: a timespec names the same nanosecond as the count it came
 * from, one given in milliseconds lies that far ahead (none for a
 * negative span), and a wait on CLOCK_MONOTONIC runs until it. */
START_TEST(clock_deadlines) {
  struct timespec t = mpn_clock_timespec(12345678901ull);
  ck_assert_int_eq(t.tv_sec, 12);
  ck_assert_int_eq(t.tv_nsec, 345678901);
  uint64_t before = mpn_clock_now_ns();
  t = mpn_clock_after_ms(250);
  uint64_t at = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
  ck_assert_uint_ge(at, before + 250000000ull);
  ck_assert_uint_le(at, mpn_clock_now_ns() + 250000000ull);
  t = mpn_clock_after_ms(-7);
  ck_assert_uint_le((uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec, mpn_clock_now_ns());
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
  pthread_mutex_lock(&lock);
  before = mpn_clock_now_ns();
  t = mpn_clock_after_ms(30);
  int rc = 0;
  while (rc == 0) rc = pthread_cond_clockwait(&cond, &lock, CLOCK_MONOTONIC, &t);
  pthread_mutex_unlock(&lock);
  ck_assert_int_eq(rc, ETIMEDOUT);
  ck_assert_uint_ge(mpn_clock_now_ns() - before, 30000000ull);
}
END_TEST

int main(void) {
  Suite* s = suite_create("core");
  TCase* tc = tcase_create("core");
  tcase_add_test(tc, abi_layout);
  tcase_add_test(tc, version_codes);
  tcase_add_test(tc, error_strings);
  tcase_add_test(tc, config_defaults_and_magic);
  tcase_add_test(tc, config_rma_ctx_env);
  tcase_add_test(tc, config_older_header);
  tcase_add_test(tc, config_field_ranges);
  tcase_add_test(tc, config_inherits_parent);
  tcase_add_test(tc, params_table);
  tcase_add_test(tc, readme_parameters);
  tcase_add_test(tc, eager_param_bounds);
  tcase_add_test(tc, debug_options);
  tcase_add_test(tc, debug_file);
  tcase_add_test(tc, debug_reset);
  tcase_add_test(tc, refused_calls);
  tcase_add_test(tc, sync_table_order);
  tcase_add_test(tc, sync_blocks_wanted);
  tcase_add_test(tc, slot_streams);
  tcase_add_test(tc, clock_deadlines);
  tcase_add_test(tc, proc_self_and_reused);
  tcase_add_test(tc, proc_zombie_and_reaped);
  suite_add_tcase(s, tc);
  return unit_suite_run(s);
}
