#!/usr/bin/env python3
"""summary.py - the Markdown summary of a bench/run-device.sh results folder.

Reads the folder's --json files and its repeated-job and halo3d files, and
prints: the floors each regime measured, every target of the send/receive
and one-sided issues with its figure, bound and verdict, and a table per
operation (both regimes side by side).  Every figure comes from the files;
a file that is missing gives "not run".

    bench/summary.py RESULTS [--commit SHA] > summary.md
    bench/summary.py RESULTS --row LABEL    # one line of the targets across runs

RESULTS is the folder, or an archive of it (.tgz, the folder as res/ inside,
as bench/results keeps them).  run-device.sh writes RESULTS/summary.md this
way; docs/PERFORMANCE.md carries the reference run's, and its table of runs
comes from --row over the archives in bench/results.
"""
import argparse
import json
import os
import re
import sys
import tarfile
import tempfile

REGIMES = [("mps-off", "without MPS"), ("mps-on", "with MPS")]


def load_json(folder, name):
    path = os.path.join(folder, name + ".json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(folder, name):
    try:
        with open(os.path.join(folder, name)) as f:
            return f.read()
    except OSError:
        return None


def row_at(run, size):
    """The result row of `size` bytes in a run, or None."""
    if not run:
        return None
    for r in run.get("results", []):
        if r.get("bytes") == size and r.get("time_us"):
            return r
    return None


def repeats(folder, regime, name):
    """(median, lowest, highest, jobs) of a repeated job's ratios, or None."""
    text = read_text(folder, "%s-%s-repeats.txt" % (regime, name))
    if not text:
        return None
    m = re.search(r"median of (\d+) jobs: ([0-9.e+-]+) x the floor \(lowest ([0-9.e+-]+), highest ([0-9.e+-]+)\)",
                  text)
    if not m:
        return None
    return float(m.group(2)), float(m.group(3)), float(m.group(4)), int(m.group(1))


def halo3d_best(folder, regime, np):
    """(exchange us, put us, flag-only us) of halo3d's best-of-3 line, or None."""
    name = "%s-halo3d%s-best.txt" % (regime, "" if np == 4 else "-np%d" % np)
    text = read_text(folder, name)
    if not text:
        return None
    m = re.search(r"best of 3: exchange ([0-9.]+) us, --put ([0-9.]+) us, flag-only ([0-9.]+) us", text)
    return tuple(float(m.group(i)) for i in (1, 2, 3)) if m else None


def fmt(v):
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return "{:,.0f}".format(v)
    if abs(v) >= 100:
        return "%.1f" % v
    return "%.3g" % v


def size_name(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d %s" % (n // scale, unit)
    return "%d B" % n


class Targets:
    """Rows of the targets table: what, regime, figure, bound, verdict."""

    def __init__(self):
        self.rows = []

    def add(self, what, regime, figure, ratio, bound, at_most=True, unit="x"):
        if ratio is None:
            verdict = "not run"
        elif (ratio <= bound) if at_most else (ratio >= bound):
            verdict = "met"
        else:
            verdict = "**not met**"
        limit = ("≤ %g%s" % (bound, unit)) if at_most else ("≥ %g" % bound)
        self.rows.append((what, regime, figure, limit, verdict))

    def markdown(self):
        out = ["| target | regime | figure | bound | verdict |", "| --- | --- | --- | --- | --- |"]
        out += ["| %s |" % " | ".join(r) for r in self.rows]
        return "\n".join(out)


def latency_target(t, folder, regime, label, what, name, floor_name, bound):
    rep = repeats(folder, regime, name)
    if rep is None:
        t.add(what, label, "not run", None, bound)
        return
    med, lo, hi, n = rep
    t.add(what, label, "median %sx the %s floor over %d jobs (%s-%s)" % (fmt(med), floor_name, n, fmt(lo), fmt(hi)),
          med, bound)


def copy_target(t, folder, regime, label, what, op, bound):
    run = load_json(folder, "%s-%s" % (regime, op))
    r = row_at(run, 1 << 30)
    if r is None:
        t.add(what, label, "not run", None, bound, at_most=False)
        return
    t.add(what, label, "%s of the copy rate (%s GB/s, floor %s)" % (
        fmt(r["vs_copy"]), fmt(r["busbw_gbps"]), fmt(run["floors"]["copy_gbps"])), r["vs_copy"], bound,
          at_most=False)


def halo3d_target(t, folder, regime, label, np):
    best = halo3d_best(folder, regime, np)
    what = "halo3d, %d ranks: time per iteration / flag-only loop" % np
    if best is None:
        t.add(what, label, "not run", None, 1.05)
        return
    e, p, f = best
    t.add(what, label, "%s / %s us = %sx (`--put`: %sx), best of 3" % (fmt(e), fmt(f), "%.3f" % (e / f),
                                                                        "%.3f" % (p / f)), e / f, 1.05)


def targets(folder):
    t = Targets()
    for regime, label in REGIMES:
        mps = regime == "mps-on"
        latency_target(t, folder, regime, label, "8 B sendrecv, 2 ranks", "sendrecv-8B",
                       "flag-only" if mps else "delegated", 2.0 if mps else 1.5)
        copy_target(t, folder, regime, label, "1 GiB sendrecv, 2 ranks, both ways summed", "sendrecv",
                    0.90 if mps else 0.75)
        halo = load_json(folder, regime + "-halo")
        r = row_at(halo, 64 << 10)
        what = "halo, 8 ranks, 26 neighbours, 64 KiB faces: host time per group (idle stream)"
        if r is None:
            t.add(what, label, "not run", None, 150, unit=" us")
        else:
            t.add(what, label, "%s us (exchange %s us)" % (fmt(r["host_idle_us"]), fmt(r["time_us"])),
                  r["host_idle_us"], 150, unit=" us")
        for np in (4, 2):
            halo3d_target(t, folder, regime, label, np)
    for regime, label in REGIMES:
        mps = regime == "mps-on"
        latency_target(t, folder, regime, label, "8 B put+signal ping-pong, one way", "putpingpong-8B",
                       "flag-only" if mps else "engine-exchange", 2.0 if mps else 1.2)
        copy_target(t, folder, regime, label, "1 GiB put, one pair", "put", 0.90)
        latency_target(t, folder, regime, label, "signal barrier, 8 ranks", "barrier-np8", "2-rank flag-only", 4.0)
    return t.markdown()


def floors(folder):
    out = ["| floor | " + " | ".join(label for _, label in REGIMES) + " |", "| --- | --- | --- |"]
    runs = [load_json(folder, r + "-sendrecv") for r, _ in REGIMES]
    fl = [run["floors"] if run else {} for run in runs]
    items = [("single-stream device copy, 1 GiB (GB/s)", "copy_gbps"),
             ("flag-only exchange (us)", "flag_us"),
             ("delegated exchange (us)", "delegated_us"),
             ("engine exchange (us)", "engine_us")]
    for text, key in items:
        out.append("| %s | %s |" % (text, " | ".join(fmt(f.get(key)) for f in fl)))
    return "\n".join(out)


def op_table(folder, name, title):
    runs = [load_json(folder, "%s-%s" % (r, name)) for r, _ in REGIMES]
    if not any(runs):
        return None
    sizes = sorted({r["bytes"] for run in runs if run for r in run.get("results", []) if r.get("time_us")})
    head = "| size |"
    for _, label in REGIMES:
        head += " time (us) %s | busbw (GB/s) | vs copy | vs floor |" % label
    out = [head, "| --- |" + " --- |" * (4 * len(REGIMES))]
    for s in sizes:
        line = "| %s |" % size_name(s)
        for run in runs:
            r = row_at(run, s)
            line += (" %s | %s | %s | %s |" % (fmt(r["time_us"]), fmt(r["busbw_gbps"]), fmt(r["vs_copy"]),
                                                fmt(r["vs_floor"]))) if r else " — | — | — | — |"
        out.append(line)
    ranks = next(run["nranks"] for run in runs if run)
    named = ["%s: %s %s us, copy %s GB/s" % (label, run["floors"].get("latency_floor"),
                                             fmt(run["floors"].get("latency_floor_us")), fmt(run["floors"].get("copy_gbps")))
             for (_, label), run in zip(REGIMES, runs) if run]
    return "**%s** (%d ranks; floors of the run, %s)\n\n%s" % (title, ranks, "; ".join(named), "\n".join(out))


def barrier_table(folder):
    out = ["| ranks | " + " | ".join("time (us) %s | vs 2-rank flag-only" % l for _, l in REGIMES) + " |",
           "| --- |" + " --- |" * (2 * len(REGIMES))]
    any_run = False
    for np in (2, 4, 8):
        line = "| %d |" % np
        for regime, _ in REGIMES:
            run = load_json(folder, "%s-barrier-np%d" % (regime, np))
            r = run and next((x for x in run.get("results", []) if x.get("time_us")), None)
            any_run = any_run or bool(r)
            line += " %s | %s |" % (fmt(r["time_us"]), fmt(r["vs_floor"])) if r else " — | — |"
        out.append(line)
    return "**signal barrier** (one loop of 1000)\n\n" + "\n".join(out) if any_run else None


def ratio_pair(values, form):
    return " / ".join("—" if v is None else form % v + "x" for v in values)


def row(folder, label):
    """One Markdown row: the 8 B sendrecv medians, halo3d at 4 and 2 ranks, the 8-rank barrier's medians."""
    regimes = [r for r, _ in REGIMES]
    med = lambda name: [(repeats(folder, r, name) or (None,))[0] for r in regimes]
    halo = lambda np: [(lambda b: b and b[0] / b[2])(halo3d_best(folder, r, np)) for r in regimes]
    return "| %s | %s | %s | %s | %s |" % (label, ratio_pair(med("sendrecv-8B"), "%.3g"), ratio_pair(halo(4), "%.3f"),
                                           ratio_pair(halo(2), "%.3f"), ratio_pair(med("barrier-np8"), "%.3g"))


def open_results(path, scratch):
    """The results folder of path: itself, or where its archive was unpacked (its res/ if it has one)."""
    if os.path.isdir(path):
        return path
    with tarfile.open(path) as tar:
        tar.extractall(scratch, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(scratch)
    inner = os.path.join(scratch, "res")
    return inner if os.path.isdir(inner) else scratch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--commit", default=None, help="the source the run built, for the heading")
    ap.add_argument("--row", metavar="LABEL", default=None, help="print only the run's line of the targets table")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        args.folder = open_results(args.folder, scratch)
        if args.row is not None:
            print(row(args.folder, args.row))
            return 0
        return report(args)


def report(args):
    probe = next(filter(None, (load_json(args.folder, r + "-sendrecv") for r, _ in REGIMES)), None)
    if probe is None:
        print("summary.py: no sendrecv results in %s" % args.folder, file=sys.stderr)
        return 1
    smi = (read_text(args.folder, "gpu.txt") or "").strip().splitlines()
    gpu = "%s (nvidia-smi: %s)" % (probe.get("gpu"), smi[0].strip()) if smi else probe.get("gpu")
    print("Run of `bench/run-device.sh`%s: %s, %s GPU(s), %s.\n" % (
        " at `%s`" % args.commit if args.commit else "", gpu, probe.get("gpus"), probe.get("library")))
    print("### Floors (plain CUDA, measured at the start of the 2-rank sendrecv run)\n")
    print(floors(args.folder) + "\n")
    print("### Targets\n")
    print(targets(args.folder) + "\n")
    print("### Operations\n")
    ops = [("sendrecv", "sendrecv (ring)"), ("pingpong", "ping-pong, one way"), ("alltoall", "all-to-all"),
           ("halo", "halo, 26 neighbours (size = face)"), ("put", "put, one pair"),
           ("putpingpong", "put+signal ping-pong, one way"), ("rmaalltoall", "one-sided all-to-all")]
    for name, title in ops:
        table = op_table(args.folder, name, title)
        if table:
            print(table + "\n")
    table = barrier_table(args.folder)
    if table:
        print(table + "\n")
    print("`vs copy`: bytes moved per second, summed over ranks, over the copy floor; `vs floor`: time over the "
          "latency floor the run names (each run measures its own floors at its start).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
