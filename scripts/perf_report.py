#!/usr/bin/env python3
"""Markdown tables and SVG plots from a Google Benchmark JSON file (standard library only).

Usage:
    python3 scripts/perf_report.py [JSON] [--out-dir DIR] [--markdown FILE]

    JSON        Google Benchmark output (--benchmark_format=json or --benchmark_out=...),
                default bench-results/latest.json (relative to the repository root)
    --out-dir   where the SVG plots go, default docs/perf (relative to the repository root)
    --markdown  also write the Markdown report to FILE (it is always printed to stdout)

Rows: the median aggregates (run with --benchmark_repetitions=N
--benchmark_report_aggregates_only=true); a file of plain iteration rows is reduced to the
median per name here. FFN decode rows are recognised by their name,
    cpu_ffn/<dtype>/<shape>/t<threads>/dense
    cpu_ffn/<dtype>/<shape>/t<threads>/<random|clustered|coalesced|gathered>_a<activity>
and get one table and one plot, ffn_speedup_<shape>_t<threads>.svg, per (shape, threads):
speed-up over dense against the activity a, with the ideal 3/(1+2a). Every other row goes to
one generic table with all its counters. The counters pct_of_ideal and pct_of_read are ratios
(1.0 = 100%) and are shown in percent; a value above 2 is taken to be a percentage already.

Exit status: 0, or 2 with a one-line error on stderr when the file is missing, is not JSON or
holds no benchmark rows. The output depends only on the JSON (same input, same bytes).
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
from xml.sax.saxutils import escape

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0"]
SETS = ["random", "clustered", "coalesced", "gathered"]
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
FFN_RE = re.compile(r"^cpu_ffn/([^/]+)/([^/]+)/t(\d+)/(?:(dense)|(random|clustered|coalesced|gathered)_a(\d+(?:\.\d+)?))(?:/|$)")
# Trailing components Google Benchmark appends to a name (not user arguments).
GB_SUFFIX_RE = re.compile(r"/(?:real_time|manual_time|process_time|iterations:\d+|repeats:\d+"
                          r"|min_time:[\d.]+s?|min_warmup_time:[\d.]+s?)$")
# Top-level keys of a row that are not user counters.
STANDARD_KEYS = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads",
                 "iterations", "real_time", "cpu_time", "time_unit", "family_index",
                 "per_family_instance_index", "aggregate_name", "aggregate_unit", "error_occurred",
                 "error_message", "label", "skipped"}
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


class ReportError(Exception):
    """A problem with the input, reported as one line and exit status 2."""


def fmt(v):
    """A number with 3 significant digits (integers and values >= 100 without decimals)."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if abs(v) >= 100 or float(v).is_integer():
        return "%.0f" % v
    return "%.3g" % v


def pct(v):
    """A ratio counter (1.0 = 100%) in percent, as text."""
    if v is None:
        return "-"
    return fmt(v if abs(v) > 2 else v * 100.0) + "%"


def base_name(row):
    """The row's name without the aggregate suffix (_median...) and Google Benchmark's suffixes."""
    name = row.get("run_name") or row["name"]
    agg = row.get("aggregate_name")
    if agg and name.endswith("_" + agg):
        name = name[: -len(agg) - 1]
    while GB_SUFFIX_RE.search(name):
        name = GB_SUFFIX_RE.sub("", name)
    return name


def counters_of(row):
    return {k: v for k, v in row.items() if k not in STANDARD_KEYS and isinstance(v, (int, float))
            and not isinstance(v, bool)}


def load(path):
    """(context, rows, repetitions): rows are dicts name, ms, counters, in file order."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ReportError("no such file: %s" % path)
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError("cannot read %s: %s" % (path, e))
    except json.JSONDecodeError as e:
        raise ReportError("%s is not JSON (%s)" % (path, e))
    bench = data.get("benchmarks") if isinstance(data, dict) else None
    if not isinstance(bench, list):
        raise ReportError("%s has no \"benchmarks\" list (not Google Benchmark JSON?)" % path)
    bench = [r for r in bench if isinstance(r, dict) and "name" in r and "real_time" in r
             and not r.get("error_occurred")]
    medians = [r for r in bench if r.get("run_type") == "aggregate" and r.get("aggregate_name") == "median"]
    rows, reps = [], 0
    if medians:
        for r in medians:
            rows.append({"name": base_name(r), "ms": r["real_time"] * TO_MS.get(r.get("time_unit", "ns"), 1e-6),
                         "counters": counters_of(r)})
            reps = max(reps, int(r.get("repetitions", 0) or 0))
    else:
        groups = {}
        for r in bench:
            if r.get("run_type", "iteration") == "iteration":
                groups.setdefault(base_name(r), []).append(r)
        for name, rs in groups.items():
            keys = sorted(set().union(*(counters_of(r) for r in rs)))
            rows.append({"name": name,
                         "ms": statistics.median(r["real_time"] * TO_MS.get(r.get("time_unit", "ns"), 1e-6) for r in rs),
                         "counters": {k: statistics.median(counters_of(r)[k] for r in rs if k in counters_of(r))
                                      for k in keys}})
            reps = max(reps, len(rs))
    if not rows:
        raise ReportError("%s holds no benchmark rows" % path)
    context = data.get("context") if isinstance(data.get("context"), dict) else {}
    return context, rows, reps


def split_rows(rows):
    """({(shape, threads): [ffn rows]}, [other rows]); ffn rows gain dtype, set, activity."""
    ffn, other = {}, []
    for r in rows:
        m = FFN_RE.match(r["name"])
        if not m:
            other.append(r)
            continue
        dtype, shape, threads, dense, kind, act = m.groups()
        r = dict(r, dtype=dtype, set="dense" if dense else kind, activity=None if dense else float(act))
        ffn.setdefault((shape, int(threads)), []).append(r)
    return ffn, other


def dtype_key(d):
    return (DTYPES.index(d), "") if d in DTYPES else (len(DTYPES), d)


def ffn_sort_key(r):
    set_rank = -1 if r["set"] == "dense" else SETS.index(r["set"])
    return (dtype_key(r["dtype"]), r["activity"] if r["activity"] is not None else -1.0, set_rank)


def thread_word(n):
    return "%d thread%s" % (n, "" if n == 1 else "s")


def md_cell(s):
    return str(s).replace("|", "\\|")


def ffn_table(rows):
    out = ["| dtype | activity | set | time (ms) | GB/s | speedup | ideal | % of ideal | path | % of stream |",
           "|---|---:|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in sorted(rows, key=ffn_sort_key):
        c = r["counters"]
        dense = r["set"] == "dense"
        path = "-" if "path" not in c else ("dense" if c["path"] >= 0.5 else "sparse")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["dtype"], "-" if dense else "%.2f" % r["activity"], r["set"], fmt(r["ms"]),
            fmt(c.get("gbps")), fmt(c.get("speedup")), fmt(c.get("ideal")),
            pct(c.get("pct_of_ideal")), path, pct(c.get("pct_of_read")) if dense else "-"))
    return out


def other_table(rows):
    keys = sorted(set().union(*(r["counters"] for r in rows)))
    out = ["| name | time (ms) | " + " | ".join(keys) + " |" if keys else "| name | time (ms) |",
           "|---|---:|" + "---:|" * len(keys)]
    for r in rows:
        cells = [md_cell(r["name"]), fmt(r["ms"])] + [fmt(r["counters"].get(k)) for k in keys]
        out.append("| " + " | ".join(cells) + " |")
    return out


def nice_step(top):
    """A tick step giving at most 8 ticks from 0 to top."""
    for mult in (1, 10, 100, 1000):
        for s in (0.5, 1, 2, 5):
            if top / (s * mult) <= 8:
                return s * mult
    return top / 8


def svg_header(width, height, title, title_x):
    """The first lines of an SVG plot: the root element, its title and a white background."""
    return ['<?xml version="1.0" encoding="UTF-8"?>',
            '<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
            'font-family="sans-serif" font-size="12">' % (width, height, width, height),
            "<title>%s</title>" % escape(title),
            '<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (width, height),
            '<text x="%d" y="28" font-size="16" text-anchor="middle">%s</text>' % (title_x, escape(title))]


def x_grid(sx, y0, y1):
    """Vertical grid lines and tick labels at 0, 0.1, ..., 1 (a fraction on the x axis)."""
    o = []
    for i in range(11):
        a = i / 10
        o.append('<line x1="%.2f" y1="%d" x2="%.2f" y2="%d" stroke="#e5e5e5"/>' % (sx(a), y0, sx(a), y1))
        o.append('<text x="%.2f" y="%d" text-anchor="middle">%.1f</text>' % (sx(a), y1 + 18, a))
    return o


def svg_plot(shape, threads, rows):
    """The speed-up plot of one (shape, threads) as SVG text."""
    W, H, x0, x1, y0, y1 = 760, 460, 64, 560, 48, 400
    pts = [r for r in rows if r["set"] != "dense" and r["counters"].get("speedup") is not None]
    top = max([3.0] + [r["counters"]["speedup"] for r in pts]) * 1.05
    step = nice_step(top)
    ymax = math.ceil(top / step) * step
    sx = lambda a: x0 + a * (x1 - x0)
    sy = lambda v: y1 - max(0.0, v) / ymax * (y1 - y0)
    title = "%s FFN decode, %s: speed-up vs activity" % (shape, thread_word(threads))
    o = svg_header(W, H, title, (x0 + x1) // 2) + x_grid(sx, y0, y1)
    n = int(round(ymax / step))
    for i in range(n + 1):  # y grid and ticks
        v = i * step
        o.append('<line x1="%d" y1="%.2f" x2="%d" y2="%.2f" stroke="#e5e5e5"/>' % (x0, sy(v), x1, sy(v)))
        o.append('<text x="%d" y="%.2f" text-anchor="end">%s</text>' % (x0 - 6, sy(v) + 4, fmt(v)))
    o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>' % (x0, y0, x1 - x0, y1 - y0))
    o.append('<text x="%d" y="%d" text-anchor="middle">activity a (fraction of neurons kept)</text>'
             % ((x0 + x1) // 2, y1 + 40))
    o.append('<text x="18" y="%d" text-anchor="middle" transform="rotate(-90 18 %d)">speed-up over dense</text>'
             % ((y0 + y1) // 2, (y0 + y1) // 2))
    ideal = " ".join("%.2f,%.2f" % (sx(i / 100), sy(3 / (1 + 2 * i / 100))) for i in range(101))
    o.append('<polyline class="ideal" points="%s" fill="none" stroke="#555555" stroke-width="1.5" '
             'stroke-dasharray="6 4"/>' % ideal)
    o.append('<line class="dense" x1="%d" y1="%.2f" x2="%d" y2="%.2f" stroke="#000000" stroke-width="1"/>'
             % (x0, sy(1), x1, sy(1)))
    dtypes = sorted({r["dtype"] for r in pts}, key=dtype_key)
    for k, d in enumerate(dtypes):
        c = COLOURS[k % len(COLOURS)]
        mine = sorted((r for r in pts if r["dtype"] == d), key=lambda r: r["activity"])
        line = [r for r in mine if r["set"] == "random"]
        if line:
            o.append('<polyline class="series" data-dtype="%s" points="%s" fill="none" stroke="%s" stroke-width="2"/>'
                     % (escape(d), " ".join("%.2f,%.2f" % (sx(r["activity"]), sy(r["counters"]["speedup"]))
                                            for r in line), c))
        for r in mine:
            o.append(marker(r["set"], sx(r["activity"]), sy(r["counters"]["speedup"]), c))
    # Legend, right of the plot.
    lx, ly = x1 + 20, y0 + 8
    entries = [("line", COLOURS[k % len(COLOURS)], d) for k, d in enumerate(dtypes)]
    entries += [("ideal", "#555555", "ideal 3/(1+2a)"), ("dense", "#000000", "dense (1.0)")]
    entries += [(s, "#555555", s + " set") for s in SETS[1:] if any(r["set"] == s for r in pts)]
    for i, (kind, c, label) in enumerate(entries):
        y = ly + 20 * i
        if kind in ("line", "ideal", "dense"):
            dash = ' stroke-dasharray="6 4"' if kind == "ideal" else ""
            o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (lx, y, lx + 24, y, c, dash))
        o.append(marker("random" if kind == "line" else kind, lx + 12, y, c))
        o.append('<text x="%d" y="%d">%s</text>' % (lx + 32, y + 4, escape(label)))
    o.append("</svg>")
    return "\n".join(x for x in o if x) + "\n"


def marker(kind, x, y, c):
    """Filled circle (random set), hollow square (clustered), hollow triangle (coalesced), hollow
    diamond (gathered: the random set with every proper subset gathered, no crossover)."""
    if kind == "random":
        return '<circle cx="%.2f" cy="%.2f" r="3.5" fill="%s"/>' % (x, y, c)
    if kind == "clustered":
        return ('<rect class="clustered" x="%.2f" y="%.2f" width="8" height="8" fill="#ffffff" stroke="%s" '
                'stroke-width="1.5"/>' % (x - 4, y - 4, c))
    if kind == "coalesced":
        return ('<polygon class="coalesced" points="%.2f,%.2f %.2f,%.2f %.2f,%.2f" fill="#ffffff" stroke="%s" '
                'stroke-width="1.5"/>' % (x, y - 5, x - 5, y + 4, x + 5, y + 4, c))
    if kind == "gathered":
        return ('<polygon class="gathered" points="%.2f,%.2f %.2f,%.2f %.2f,%.2f %.2f,%.2f" fill="#ffffff" '
                'stroke="%s" stroke-width="1.5"/>' % (x, y - 5, x + 5, y, x, y + 5, x - 5, y, c))
    return ""


def report(path, out_dir, markdown):
    """Writes the SVGs and returns the Markdown text."""
    context, rows, reps = load(path)
    ffn, other = split_rows(rows)
    host = "host %s, %s CPUs" % (context.get("host_name", "?"), context.get("num_cpus", "?"))
    if context.get("mhz_per_cpu"):
        host += " @ %s MHz" % context["mhz_per_cpu"]
    what = "medians of %d repetitions" % reps if reps else "medians (repetition count not recorded)"
    shown = os.path.relpath(os.path.abspath(path), REPO)
    shown = path if shown.startswith("..") else shown.replace(os.sep, "/")
    md = ["# actsparse performance report", "",
          "Source: `%s` (%s, %s). Values are %s." % (shown, host, context.get("date", "date unknown"), what), ""]
    link_base = os.path.dirname(os.path.abspath(markdown)) if markdown else os.getcwd()
    if not ffn:
        md += ["No FFN decode rows (cpu_ffn/...) in this file; no SVG written.", ""]
    else:
        os.makedirs(out_dir, exist_ok=True)
    for shape, threads in sorted(ffn, key=lambda k: (k[0], k[1])):
        svg = os.path.join(out_dir, "ffn_speedup_%s_t%d.svg" % (shape, threads))
        with open(svg, "w", encoding="utf-8", newline="\n") as f:
            f.write(svg_plot(shape, threads, ffn[(shape, threads)]))
        link = os.path.relpath(os.path.abspath(svg), link_base).replace(os.sep, "/")
        md += ["## FFN decode, %s, %s" % (shape, thread_word(threads)), ""]
        md += ffn_table(ffn[(shape, threads)])
        md += ["", "![%s FFN speed-up, %s](%s)" % (shape, thread_word(threads), link), ""]
    if other:
        md += ["## Other rows", ""] + other_table(other) + [""]
    return "\n".join(md)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", nargs="?", default=os.path.join(REPO, "bench-results", "latest.json"))
    p.add_argument("--out-dir", default=os.path.join(REPO, "docs", "perf"))
    p.add_argument("--markdown", metavar="FILE")
    args = p.parse_args(argv)
    try:
        text = report(args.json, args.out_dir, args.markdown)
    except ReportError as e:
        print("perf_report: error: %s" % e, file=sys.stderr)
        return 2
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
