/*
 * bench_report.c - what mpinccl_bench prints (the header with the floors and
 * the regime, the table) and writes with --json; rank 0 only.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const char* const op_names[] = {"sendrecv", "alltoall", "pingpong", "halo",
                                       "put",      "putpingpong", "barrier", "rmaalltoall"};

const char* bench_op_name(op_t op) { return op_names[op]; }

int bench_op_one_way(op_t op) { return op == OP_PINGPONG || op == OP_PUTPINGPONG || op == OP_PUT; }

int bench_op_round_trip(op_t op) { return op == OP_PINGPONG || op == OP_PUTPINGPONG; }

double bench_net_floor_gbps(const bench_t* b) {
  return bench_op_one_way(b->o->op) ? b->net.slowest_gbps : b->net.slowest_both_gbps;
}

/* ---------------------------------------------------------------- output -- */

/* 3 significant digits; an exponent only below 0.001; "n/a" for a missing ratio. */
static const char* fmt_ratio(double v, char* buf, size_t len) {
  if (!(v > 0)) return "n/a";
  if (v < 0.001) {
    snprintf(buf, len, "%.2e", v);
    return buf;
  }
  int decimals = 2;
  for (double p = 1; v >= 10 * p && decimals > 0; p *= 10) decimals--;
  for (double p = 1; v < p && decimals < 12; p /= 10) decimals++;
  snprintf(buf, len, "%.*f", decimals, v);
  return buf;
}

static const char* fmt_us(double us, char* buf, size_t len) {
  if (!(us > 0)) return "n/a";
  snprintf(buf, len, "%.2f us", us);
  return buf;
}

static const char* regime_text(const topo_t* t) {
  if (t->mps) return t->mps_mixed ? "MPS on (on some ranks only)" : "MPS on";
  return t->ranks_per_gpu > 1 ? "MPS off, ranks share a GPU: time-sliced"
                              : "MPS off, one rank per GPU";
}

static void library_text(char* buf, size_t len) {
  int v = 0;
  ncclGetVersion(&v);
#ifdef BENCH_WITH_NVIDIA_NCCL
  /* A header of another version than the library (CUDA ships an nccl.h of
   * its own) may turn operations off (BENCH_HAVE_RMA): say so. */
  if (v != NCCL_VERSION_CODE)
    snprintf(buf, len, "NVIDIA NCCL %d.%d.%d (built with the header of %d.%d.%d)", v / 10000, v / 100 % 100, v % 100,
             NCCL_VERSION_CODE / 10000, NCCL_VERSION_CODE / 100 % 100, NCCL_VERSION_CODE % 100);
  else
    snprintf(buf, len, "NVIDIA NCCL %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
#else
  snprintf(buf, len, "mpinccl %d.%d (NCCL API %d.%d.%d)", MPINCCL_VERSION_MAJOR,
           MPINCCL_VERSION_MINOR, v / 10000, v / 100 % 100, v % 100);
#endif
}

static const char* const op_texts[] = {
    "ring: send to rank+1, receive from rank-1, one group; busbw = algbw",
    "all-to-all, itself included, one group; busbw = algbw * (P-1)/P",
    "ping-pong between ranks 0 and 1 (others idle); time = one way = round trip / 2",
    "3D periodic halo, 26 neighbours, one group; size = face bytes",
    "ncclPutSignal from rank 0 into rank 1's window, rank 1 waits; busbw = algbw",
    "ncclPutSignal ping-pong between ranks 0 and 1; time = one way = round trip / 2",
    "every rank ncclSignal's every rank and waits for all, one group; no data",
    "ncclPutSignal to every rank's window, itself included, and one wait for all, one group"};

void bench_report_header(const bench_t* b) {
  if (b->rank != 0) return;
  const options_t* o = b->o;
  const bench_floors_t* f = &b->floors;
  char lib[96], u1[32], u2[32];
  library_text(lib, sizeof(lib));
  if (o->op_set)
    printf("# mpinccl_bench  op %s: %s\n", bench_op_name(o->op), op_texts[o->op]);
  else
    printf("# mpinccl_bench  floors only\n");
  printf("# library   %s\n", lib);
  printf("# ranks     %d on %d GPU%s (%d per GPU at most), %s\n", b->nranks, b->topo.gpus,
         b->topo.gpus == 1 ? "" : "s", b->topo.ranks_per_gpu, b->topo.gpu_name);
  printf("# regime    %s\n", regime_text(&b->topo));
  printf("# floors    copy      %.1f GB/s (one cudaMemcpyAsync D2D of %zu B, best of %d, rank 0)\n",
         f->copy_gbps, f->copy_bytes, f->copy_reps);
  printf("#           flag-only %s (per exchange, ranks 0-1: write peer's flag, wait for own)\n",
         f->flag_us > 0 ? fmt_us(f->flag_us, u1, sizeof(u1)) : "n/a");
  printf("#           delegated %s (per exchange, ranks 0-1: rank 0 copies 8 B both ways)\n",
         f->delegated_us > 0 ? fmt_us(f->delegated_us, u2, sizeof(u2)) : "n/a");
  printf("#           engine    %s (per exchange, ranks 0-1: each copies 8 B into the other)\n",
         f->engine_us > 0 ? fmt_us(f->engine_us, u2, sizeof(u2)) : "n/a");
  if (f->na_reason[0]) printf("#           exchange floors n/a: %s\n", f->na_reason);
  if (o->op_set && o->op == OP_BARRIER) {
    printf("#           barrier   %s (flag-only barrier of all %d ranks: each writes every rank's "
           "flag, waits for all; memops)\n",
           f->barrier_us > 0 ? fmt_us(f->barrier_us, u1, sizeof(u1)) : "n/a (not all on one host, or no CUDA IPC)",
           f->barrier_ranks);
    printf("#           batched   %s (the same barrier, its memops in one batch per rank: one stream item)\n",
           f->barrier_batch_us > 0 ? fmt_us(f->barrier_batch_us, u1, sizeof(u1)) : "n/a");
  }
  const bench_net_t* net = &b->net;
  if (o->net) {
    printf("# net       d2h %.1f GB/s, h2d %.1f GB/s (pinned cudaMemcpyAsync of %zu B, one stream, rank 0)\n",
           net->d2h_gbps, net->h2d_gbps, net->bytes);
    if (net->measured)
      printf("#           UCX %.2f GB/s (tagged %zu B of host memory, rank 0 to 1), %.2f GB/s both ways "
             "at once (summed), UCX put %s (8 B one way)\n",
             net->ucx_gbps, net->bytes, net->ucx_both_gbps, fmt_us(net->put_us, u1, sizeof(u1)));
    else
      printf("#           UCX floors n/a: %s\n", net->reason);
  }
  if (o->net)
    printf("# vs-copy   bytes moved per second, summed over ranks / slowest stage (%.2f GB/s, UCX %s)\n",
           bench_net_floor_gbps(b), bench_op_one_way(o->op) ? "one way" : "both ways");
  else
    printf("# vs-copy   bytes moved per second, summed over ranks / copy floor\n");
  printf("# vs-floor  time / %s floor%s\n", b->floor_name,
         b->floor_us > 0 ? "" : " (n/a: not measured)");
  if (o->op == OP_HALO) {
    printf(
        "# halo      process grid %d x %d x %d, periodic; edge = 8 * floor(sqrt(face / 8)) B, "
        "corner = %d B\n",
        b->dims[0], b->dims[1], b->dims[2], HALO_CORNER_BYTES);
    printf("#           algbw counts 6 faces + 12 edges + 8 corners sent per rank\n");
  }
  printf("# host(us)  host time of one iteration's calls (ncclGroupStart to ncclGroupEnd's return), "
         "mean over iterations and ranks%s\n", o->graph ? " (during capture)" : "");
  printf("# idle(us)  the same on an idle stream (after a synchronization and a barrier; 5 iterations "
         "after the timed ones, mean over them and ranks): the calls' own cost, without a full "
         "command queue%s\n", o->graph ? " (n/a with -G)" : "");
  printf("# iters %d, warmup %d, graph %d, check %d, register %d\n", o->iters, o->warmup, o->graph,
         o->check, o->reg);
  fflush(stdout);
}

void bench_report_table_header(const bench_t* b) {
  if (b->rank != 0 || b->o->floors_only) return;
  if (b->o->op == OP_BARRIER && b->floors.barrier_comm_us > 0) {
    char u[32];
    printf("#           batched   %s again, measured once the communicator was made\n",
           fmt_us(b->floors.barrier_comm_us, u, sizeof(u)));
  }
  printf("#\n# %10s %10s %12s %12s %9s %9s %7s%s\n", "size(B)", "time(us)", "algbw(GB/s)",
         "busbw(GB/s)", "vs-copy", "vs-floor", "#wrong",
         b->o->op == OP_HALO ? "   host(us)   idle(us)  edge(B)" : "   host(us)   idle(us)");
  fflush(stdout);
}

void bench_report_row(const bench_t* b, const result_t* r) {
  if (b->rank != 0) return;
  char c[32], f[32], w[32];
  if (r->wrong < 0)
    snprintf(w, sizeof(w), "n/a");
  else
    snprintf(w, sizeof(w), "%lld", r->wrong);
  printf("  %10zu %10.2f %12.2f %12.2f %9s %9s %7s", r->bytes, r->time_us, r->algbw, r->busbw,
         fmt_ratio(r->vs_copy, c, sizeof(c)), fmt_ratio(r->vs_floor, f, sizeof(f)), w);
  printf(" %10.2f", r->host_us);
  if (r->host_idle_us >= 0)
    printf(" %10.2f", r->host_idle_us);
  else
    printf(" %10s", "n/a");
  if (b->o->op == OP_HALO) printf(" %8zu", r->edge);
  printf("\n");
  fflush(stdout);
}

static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

/* A number, or null when not measured (negative). */
static void json_num(FILE* f, double v) {
  if (v >= 0)
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

static void json_results(FILE* f, const bench_t* b) {
  fprintf(f, "  \"results\": [");
  for (int i = 0; i < b->nresults; i++) {
    const result_t* r = &b->results[i];
    fprintf(f, "%s\n    {\"bytes\": %zu, \"time_us\": ", i ? "," : "", r->bytes);
    json_num(f, r->time_us);
    fprintf(f, ", \"algbw_gbps\": ");
    json_num(f, r->algbw);
    fprintf(f, ", \"busbw_gbps\": ");
    json_num(f, r->busbw);
    fprintf(f, ", \"vs_copy\": ");
    json_num(f, r->vs_copy);
    fprintf(f, ", \"vs_floor\": ");
    json_num(f, r->vs_floor);
    if (r->wrong >= 0)
      fprintf(f, ", \"errors\": %lld", r->wrong);
    else
      fprintf(f, ", \"errors\": null");
    if (b->o->op == OP_HALO)
      fprintf(f, ", \"edge_bytes\": %zu, \"corner_bytes\": %d", r->edge, HALO_CORNER_BYTES);
    fprintf(f, ", \"host_us\": ");
    json_num(f, r->host_us);
    fprintf(f, ", \"host_us_max\": ");
    json_num(f, r->host_us_max);
    fprintf(f, ", \"host_idle_us\": ");
    json_num(f, r->host_idle_us);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ]\n");
}

int bench_report_json(const bench_t* b) {
  const options_t* o = b->o;
  if (b->rank != 0 || o->json == NULL) return 0;
  FILE* f = fopen(o->json, "w");
  if (f == NULL) {
    fprintf(stderr, "mpinccl_bench: cannot write %s: %s\n", o->json, strerror(errno));
    return 1;
  }
  char lib[96];
  library_text(lib, sizeof(lib));
  const bench_floors_t* fl = &b->floors;
  fprintf(f, "{\n  \"benchmark\": \"mpinccl_bench\",\n  \"library\": ");
  json_str(f, lib);
  fprintf(f, ",\n  \"op\": \"%s\",\n  \"nranks\": %d,\n  \"gpu\": ",
          o->op_set ? bench_op_name(o->op) : "none", b->nranks);
  json_str(f, b->topo.gpu_name);
  fprintf(f, ",\n  \"gpus\": %d,\n  \"ranks_per_gpu\": %d,\n", b->topo.gpus, b->topo.ranks_per_gpu);
  fprintf(f, "  \"regime\": \"mps %s\",\n  \"mps\": %s,\n", b->topo.mps ? "on" : "off",
          b->topo.mps ? "true" : "false");
  fprintf(f, "  \"time\": \"%s\",\n",
          bench_op_round_trip(o->op) ? "one-way latency (round trip / 2)" : "per iteration");
  fprintf(f,
          "  \"options\": {\"minbytes\": %zu, \"maxbytes\": %zu, \"stepfactor\": %ld, \"iters\": "
          "%d, \"warmup\": %d, \"graph\": %d, \"check\": %d, \"register\": %d},\n",
          o->minbytes, o->maxbytes, o->stepfactor, o->iters, o->warmup, o->graph, o->check, o->reg);
  if (o->op == OP_HALO)
    fprintf(f,
            "  \"halo\": {\"dims\": [%d, %d, %d], \"edge_rule\": \"8 * floor(sqrt(face / 8))\", "
            "\"corner_bytes\": %d},\n",
            b->dims[0], b->dims[1], b->dims[2], HALO_CORNER_BYTES);
  fprintf(f, "  \"floors\": {\"copy_gbps\": ");
  json_num(f, fl->copy_gbps);
  fprintf(f, ", \"copy_bytes\": %zu, \"flag_us\": ", fl->copy_bytes);
  json_num(f, fl->flag_us);
  fprintf(f, ", \"delegated_us\": ");
  json_num(f, fl->delegated_us);
  fprintf(f, ", \"engine_us\": ");
  json_num(f, fl->engine_us);
  fprintf(f, ", \"barrier_us\": ");
  json_num(f, fl->barrier_us);
  fprintf(f, ", \"barrier_ranks\": %d", fl->barrier_ranks);
  fprintf(f, ", \"barrier_batch_us\": ");
  json_num(f, fl->barrier_batch_us);
  fprintf(f, ", \"barrier_comm_us\": ");
  json_num(f, fl->barrier_comm_us);
  fprintf(f, ", \"exchange\": \"per exchange\", \"latency_floor\": \"%s\", \"latency_floor_us\": ",
          b->floor_name);
  json_num(f, b->floor_us);
  fprintf(f, ", \"exchange_na\": ");
  if (fl->na_reason[0])
    json_str(f, fl->na_reason);
  else
    fputs("null", f);
  fprintf(f, "},\n");
  if (o->net) {
    const bench_net_t* net = &b->net;
    fprintf(f, "  \"net\": {\"bytes\": %zu, \"d2h_gbps\": ", net->bytes);
    json_num(f, net->d2h_gbps);
    fprintf(f, ", \"h2d_gbps\": ");
    json_num(f, net->h2d_gbps);
    fprintf(f, ", \"ucx_gbps\": ");
    json_num(f, net->measured ? net->ucx_gbps : -1);
    fprintf(f, ", \"ucx_both_gbps\": ");
    json_num(f, net->measured ? net->ucx_both_gbps : -1);
    fprintf(f, ", \"ucx_put_us\": ");
    json_num(f, net->measured ? net->put_us : -1);
    fprintf(f, ", \"slowest_gbps\": ");
    json_num(f, bench_net_floor_gbps(b));
    fprintf(f, ", \"na\": ");
    if (net->reason[0])
      json_str(f, net->reason);
    else
      fputs("null", f);
    fprintf(f, "},\n");
  }
  fprintf(f, "  \"error\": ");
  if (b->error[0])
    json_str(f, b->error);
  else
    fputs("null", f);
  fprintf(f, ",\n");
  json_results(f, b);
  fprintf(f, "}\n");
  int failed = ferror(f);
  if (fclose(f) != 0 || failed) {
    fprintf(stderr, "mpinccl_bench: writing %s failed\n", o->json);
    return 1;
  }
  return 0;
}
