/*
 * bench_options.c - mpinccl_bench's command line: the options, their
 * checks, and the help text (bench/README.md describes them).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(FILE* out) {
  fprintf(out,
          "usage: mpirun -np P mpinccl_bench -o OP [options]\n"
          "  -o, --op OP          sendrecv | alltoall | pingpong | halo | put | putpingpong |\n"
          "                       barrier | rmaalltoall\n"
          "  -b, --minbytes N     smallest size (default 8); K, M, G suffixes (x1024)\n"
          "  -e, --maxbytes N     largest size (default 64M)\n"
          "  -f, --stepfactor F   size multiplier between rows (default 2)\n"
          "  -n, --iters N        timed iterations per size (default 20)\n"
          "  -w, --warmup N       untimed iterations per size (default 5)\n"
          "  -G, --graph 0|1      capture the timed iterations in a CUDA graph, time one\n"
          "                       replay (default 0); exits 3 when capture fails\n"
          "  -c, --check 0|1      verify the received bytes after the timed loop (default 1)\n"
          "  -R, --register 0|1   ncclCommRegister the buffers (default 0)\n"
          "      --json FILE      write the header and all rows to FILE (rank 0)\n"
          "      --floors-only    measure and print the floors, then exit\n"
          "      --net            the UCX path's floors too (pinned copies, UCX bandwidth and\n"
          "                       put latency); vs-copy and vs-floor then use them\n"
          "  -h, --help           this text\n"
          "sizes: sendrecv, pingpong, put, putpingpong: bytes per message; alltoall,\n"
          "rmaalltoall: bytes each rank sends in all (size/P to each rank, itself\n"
          "included); halo: bytes per face; barrier: one row, no data.\n");
}

/* A size with an optional K, M or G suffix (powers of 1024). */
static int parse_size(const char* s, size_t* out) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s || errno != 0 || *s == '-') return -1;
  unsigned shift = 0;
  const char* unit = *end ? strchr("KMG", toupper((unsigned char)*end)) : NULL;
  if (unit) {
    shift = 10 * (unsigned)(unit - "KMG" + 1);
    end++;
  }
  if (*end != '\0' || v > (SIZE_MAX >> 2) >> shift) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_long(const char* s, long lo, long hi, long* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parse_int(const char* s, int lo, int hi, int* out) {
  long v;
  if (parse_long(s, lo, hi, &v) != 0) return -1;
  *out = (int)v;
  return 0;
}

static int parse_op(const char* s, op_t* out) {
  for (int i = 0; i < OP_COUNT; i++)
    if (strcmp(s, bench_op_name((op_t)i)) == 0) {
      *out = (op_t)i;
      return 0;
    }
  return -1;
}

/* Returns 0 to run, -1 after --help, 1 on a bad option (said on rank 0).
 * Every rank parses the same argv, so all reach the same answer. */
int bench_options_parse(int argc, char** argv, int world_rank, int world_size, options_t* o) {
  static const struct option longopts[] = {
      {"op", required_argument, NULL, 'o'},       {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'}, {"stepfactor", required_argument, NULL, 'f'},
      {"iters", required_argument, NULL, 'n'},    {"warmup", required_argument, NULL, 'w'},
      {"graph", required_argument, NULL, 'G'},    {"check", required_argument, NULL, 'c'},
      {"register", required_argument, NULL, 'R'}, {"json", required_argument, NULL, 'J'},
      {"floors-only", no_argument, NULL, 'F'},    {"net", no_argument, NULL, 'N'},
      {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
  *o = (options_t){.op = OP_SENDRECV,
                   .minbytes = 8,
                   .maxbytes = (size_t)64 << 20,
                   .stepfactor = 2,
                   .iters = 20,
                   .warmup = 5,
                   .check = 1};
  opterr = 0; /* getopt would complain once per rank */
  int c, bad = 0;
  while (!bad && (c = getopt_long(argc, argv, "o:b:e:f:n:w:G:c:R:h", longopts, NULL)) != -1) {
    switch (c) {
      case 'o': bad = parse_op(optarg, &o->op), o->op_set = 1; break;
      case 'b': bad = parse_size(optarg, &o->minbytes); break;
      case 'e': bad = parse_size(optarg, &o->maxbytes); break;
      case 'f': bad = parse_long(optarg, 2, 1 << 20, &o->stepfactor); break;
      case 'n': bad = parse_int(optarg, 1, 1 << 24, &o->iters); break;
      case 'w': bad = parse_int(optarg, 0, 1 << 24, &o->warmup); break;
      case 'G': bad = parse_int(optarg, 0, 1, &o->graph); break;
      case 'c': bad = parse_int(optarg, 0, 1, &o->check); break;
      case 'R': bad = parse_int(optarg, 0, 1, &o->reg); break;
      case 'J': o->json = optarg; break;
      case 'F': o->floors_only = 1; break;
      case 'N': o->net = 1; break;
      case 'h':
        if (world_rank == 0) usage(stdout);
        return -1;
      default: bad = 1; break;
    }
  }
  const char* err = bad ? "bad option or value" : NULL;
  if (!err && optind < argc) err = "unexpected argument";
  if (!err && !o->op_set && !o->floors_only) err = "-o OP is required";
  if (!err && (o->minbytes < 1 || o->maxbytes < o->minbytes)) err = "need 1 <= minbytes <= maxbytes";
  if (!err && (o->op == OP_PINGPONG || o->op == OP_PUT || o->op == OP_PUTPINGPONG) && world_size < 2)
    err = "this operation needs at least 2 ranks";
  if (!err && bench_op_rma(o->op) && !BENCH_HAVE_RMA) err = "one-sided operations need NCCL 2.29 or later";
  if (err && world_rank == 0) {
    if (bad || optind < argc)
      fprintf(stderr, "mpinccl_bench: %s near '%s'\n", err, argv[bad ? optind - 1 : optind]);
    else
      fprintf(stderr, "mpinccl_bench: %s\n", err);
    fprintf(stderr, "  (mpinccl_bench --help lists the options)\n");
  }
  return err ? 1 : 0;
}
