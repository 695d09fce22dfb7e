#!/usr/bin/env python3
"""plot.py - draws mpinccl_bench results (--json files) as one PNG.

Left: bus bandwidth against size, log-log, with each run's copy-rate floor as
a horizontal dashed line.  Right: time (one-way latency for the ping-pongs) against
size, log-log, with the flag-only (dashed) and delegated (dotted) exchange
floors as horizontal lines.

    bench/plot.py --json a.json [--json b.json ...] [-o bench.png] [--title T]

Uses matplotlib when it can be imported (Debian: apt-get install
python3-matplotlib); otherwise draws the same two panels with the small
pure-Python PNG writer below (no dependencies beyond the standard library).
"""
import argparse
import json
import math
import os
import struct
import sys
import zlib

COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14),
           (148, 103, 189), (140, 86, 75), (227, 119, 194), (23, 190, 207)]


def load(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            run = json.load(f)
        run["_path"] = path
        rows = [r for r in run.get("results", []) if r.get("time_us")]
        run["_rows"] = rows
        runs.append(run)
    return runs


def label_of(run, unique):
    text = "%s P=%d %s (%s)" % (run.get("op"), run.get("nranks", 0),
                                run.get("regime", ""), run.get("library", "").split(" (")[0])
    if not unique:
        text += " " + os.path.basename(run["_path"])
    return text


def size_text(v):
    for div, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if v >= div:
            return "%g%s" % (v / div, suffix)
    return "%g" % v


def panels(runs):
    """The two panels as data: (title, xlabel, ylabel, series, floors)."""
    labels = [label_of(r, True) for r in runs]
    unique = len(set(labels)) == len(labels)
    bw, lat, bw_floors, lat_floors = [], [], [], []
    for i, run in enumerate(runs):
        label = label_of(run, unique)
        xs = [r["bytes"] for r in run["_rows"]]
        bw.append((label, i, xs, [r.get("busbw_gbps") or 0 for r in run["_rows"]]))
        lat.append((label, i, xs, [r["time_us"] for r in run["_rows"]]))
        fl = run.get("floors", {})
        if fl.get("copy_gbps"):
            bw_floors.append(("copy %.0f GB/s" % fl["copy_gbps"], i, fl["copy_gbps"], "dashed"))
        if fl.get("flag_us"):
            lat_floors.append(("flag-only %.1f us" % fl["flag_us"], i, fl["flag_us"], "dashed"))
        if fl.get("delegated_us"):
            lat_floors.append(("delegated %.1f us" % fl["delegated_us"], i, fl["delegated_us"],
                               "dotted"))
    pingpong = any(r.get("op") in ("pingpong", "putpingpong") for r in runs)
    time_label = "time (us)" + (", ping-pongs: one way" if pingpong else " per iteration")
    return [("bus bandwidth", "size (B)", "busbw (GB/s)", bw, bw_floors),
            ("time", "size (B)", time_label, lat, lat_floors)]


def plot_matplotlib(runs, out, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    for ax, (name, xl, yl, series, floors) in zip(axes, panels(runs)):
        for label, i, xs, ys in series:
            pts = [(x, y) for x, y in zip(xs, ys) if x > 0 and y > 0]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=3, color=[c / 255 for c in COLOURS[i % 8]],
                        label=label)
        for label, i, y, style in floors:
            ax.axhline(y, linestyle=style, color=[c / 255 for c in COLOURS[i % 8]], lw=1,
                       label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: size_text(v)))
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(name)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


# ---------------------------------------------------------------------------
# Fallback: a canvas, lines, a 5x7 font, and a PNG encoder.

FONT = {  # 5x7 glyphs, one 5-bit row per entry, top to bottom
    "0": "0e 11 13 15 19 11 0e", "1": "04 0c 04 04 04 04 0e", "2": "0e 11 01 02 04 08 1f",
    "3": "1f 02 04 02 01 11 0e", "4": "02 06 0a 12 1f 02 02", "5": "1f 10 1e 01 01 11 0e",
    "6": "06 08 10 1e 11 11 0e", "7": "1f 01 02 04 08 08 08", "8": "0e 11 11 0e 11 11 0e",
    "9": "0e 11 11 0f 01 02 0c", "A": "0e 11 11 1f 11 11 11", "B": "1e 11 11 1e 11 11 1e",
    "C": "0e 11 10 10 10 11 0e", "D": "1c 12 11 11 11 12 1c", "E": "1f 10 10 1e 10 10 1f",
    "F": "1f 10 10 1e 10 10 10", "G": "0e 11 10 17 11 11 0f", "H": "11 11 11 1f 11 11 11",
    "I": "0e 04 04 04 04 04 0e", "J": "07 02 02 02 02 12 0c", "K": "11 12 14 18 14 12 11",
    "L": "10 10 10 10 10 10 1f", "M": "11 1b 15 15 11 11 11", "N": "11 11 19 15 13 11 11",
    "O": "0e 11 11 11 11 11 0e", "P": "1e 11 11 1e 10 10 10", "Q": "0e 11 11 11 15 12 0d",
    "R": "1e 11 11 1e 14 12 11", "S": "0f 10 10 0e 01 01 1e", "T": "1f 04 04 04 04 04 04",
    "U": "11 11 11 11 11 11 0e", "V": "11 11 11 11 11 0a 04", "W": "11 11 11 15 15 15 0a",
    "X": "11 11 0a 04 0a 11 11", "Y": "11 11 11 0a 04 04 04", "Z": "1f 01 02 04 08 10 1f",
    ".": "00 00 00 00 00 0c 0c", "-": "00 00 00 1f 00 00 00", "/": "01 01 02 04 08 10 10",
    "(": "02 04 08 08 08 04 02", ")": "08 04 02 02 02 04 08", ":": "00 0c 0c 00 0c 0c 00",
    "=": "00 00 1f 00 1f 00 00", "_": "00 00 00 00 00 00 1f", ",": "00 00 00 00 0c 04 08",
    "+": "00 04 04 1f 04 04 00", "%": "18 19 02 04 08 13 03", " ": "00 00 00 00 00 00 00",
}


class Canvas:
    def __init__(self, w, h):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x, y, c):
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def line(self, x0, y0, x1, y1, c, width=1, pattern=None):
        x0, y0, x1, y1 = int(round(x0)), int(round(y0)), int(round(x1)), int(round(y1))
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err, step = dx + dy, 0
        while True:
            if pattern is None or pattern[step % len(pattern)]:
                for k in range(width):
                    self.dot(x0 + (k if dy != 0 and dx == 0 else 0), y0 + (k if dx != 0 else 0), c)
            if x0 == x1 and y0 == y1:
                return
            step += 1
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def box(self, x, y, w, h, c):
        for j in range(h):
            for i in range(w):
                self.dot(x + i, y + j, c)

    def text(self, x, y, s, c=(0, 0, 0), scale=1, vertical=False):
        for n, ch in enumerate(s.upper()):
            rows = FONT.get(ch, FONT[" "]).split()
            for r, bits in enumerate(rows):
                v = int(bits, 16)
                for col in range(5):
                    if v & (0x10 >> col):
                        for a in range(scale):
                            for b in range(scale):
                                if vertical:  # reads bottom to top
                                    self.dot(x + r * scale + a, y - (n * 6 + col) * scale - b, c)
                                else:
                                    self.dot(x + (n * 6 + col) * scale + a, y + r * scale + b, c)

    def png(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3])
                       for y in range(self.h))

        def chunk(kind, data):
            return (struct.pack(">I", len(data)) + kind + data +
                    struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))

        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)))
            f.write(chunk(b"IDAT", zlib.compress(raw, 9)))
            f.write(chunk(b"IEND", b""))


def log_range(values):
    vals = [v for v in values if v and v > 0]
    if not vals:
        return 0.0, 1.0
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    return float(lo), float(hi if hi > lo else lo + 1)


def draw_panel(cv, x0, y0, w, h, panel):
    name, xl, yl, series, floors = panel
    xs = [x for _, _, sx, _ in series for x in sx]
    ys = [y for _, _, _, sy in series for y in sy] + [f[2] for f in floors]
    xpos = [x for x in xs if x > 0] or [1, 2]
    xlo, xhi = math.floor(math.log2(min(xpos))), math.ceil(math.log2(max(xpos)))
    xhi = max(xhi, xlo + 1)
    ylo, yhi = log_range(ys)
    X = lambda v: x0 + (math.log2(v) - xlo) / (xhi - xlo) * w
    Y = lambda v: y0 + h - (math.log10(v) - ylo) / (yhi - ylo) * h
    grey, black = (225, 225, 225), (0, 0, 0)
    step = max(1, math.ceil((xhi - xlo) / 10))
    for e in range(xlo, xhi + 1, step):  # sizes are powers of two: binary units
        px = X(2 ** e)
        cv.line(px, y0, px, y0 + h, grey)
        lab = size_text(2 ** e)
        cv.text(int(px) - len(lab) * 3, y0 + h + 6, lab)
    for d in range(int(ylo), int(yhi) + 1):
        py = Y(10 ** d)
        cv.line(x0, py, x0 + w, py, grey)
        lab = "%g" % (10 ** d)
        cv.text(x0 - 6 - len(lab) * 6, int(py) - 3, lab)
    cv.line(x0, y0, x0, y0 + h, black)
    cv.line(x0, y0 + h, x0 + w, y0 + h, black)
    cv.text(x0 + w // 2 - len(name) * 6, y0 - 22, name, scale=2)
    cv.text(x0 + w // 2 - len(xl) * 3, y0 + h + 22, xl)
    cv.text(x0 - 62, y0 + h // 2 + len(yl) * 3, yl, vertical=True)
    for label, i, y, style in floors:
        pattern = [1] * 8 + [0] * 5 if style == "dashed" else [1, 0, 0]
        cv.line(x0, Y(y), x0 + w, Y(y), COLOURS[i % 8], pattern=pattern)
    for label, i, sx, sy in series:
        pts = [(X(x), Y(y)) for x, y in zip(sx, sy) if x > 0 and y > 0]
        for (ax, ay), (bx, by) in zip(pts, pts[1:]):
            cv.line(ax, ay, bx, by, COLOURS[i % 8], width=2)
        for px, py in pts:
            cv.box(int(px) - 2, int(py) - 2, 5, 5, COLOURS[i % 8])
    ly = y0 + 6  # legend, top left inside the panel
    for label, i, _, _ in series:
        cv.box(x0 + 8, ly, 12, 6, COLOURS[i % 8])
        cv.text(x0 + 26, ly, label)
        ly += 11
    for label, i, _, style in floors:
        pattern = [1] * 4 + [0] * 2 if style == "dashed" else [1, 0, 0]
        cv.line(x0 + 8, ly + 3, x0 + 20, ly + 3, COLOURS[i % 8], pattern=pattern)
        cv.text(x0 + 26, ly, label)
        ly += 11


def plot_fallback(runs, out, title):
    cv = Canvas(1400, 600)
    for k, panel in enumerate(panels(runs)):
        draw_panel(cv, 90 + k * 700, 70, 570, 450, panel)
    if title:
        cv.text(700 - len(title) * 6, 12, title, scale=2)
    cv.png(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="append", default=[], metavar="FILE",
                    help="a file written by mpinccl_bench --json (repeat for several)")
    ap.add_argument("files", nargs="*", help="more --json files")
    ap.add_argument("-o", "--output", default="mpinccl_bench.png", help="PNG to write")
    ap.add_argument("--title", default="", help="title above the panels")
    ap.add_argument("--no-matplotlib", action="store_true", help="use the built-in PNG writer")
    args = ap.parse_args()
    paths = args.json + args.files
    if not paths:
        ap.error("no --json file given")
    runs = load(paths)
    if not any(r["_rows"] for r in runs):
        sys.exit("plot.py: no result rows in %s" % ", ".join(paths))
    backend = "built-in PNG writer"
    if not args.no_matplotlib:
        try:
            import matplotlib  # noqa: F401
            backend = "matplotlib"
        except ImportError:
            pass
    if backend == "matplotlib":
        plot_matplotlib(runs, args.output, args.title)
    else:
        plot_fallback(runs, args.output, args.title)
    print("plot.py: wrote %s (%s)" % (args.output, backend))


if __name__ == "__main__":
    main()
