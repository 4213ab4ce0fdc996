#!/usr/bin/env python3
"""Markdown tables and speed-up plots (matplotlib, PNG and SVG) from a Google Benchmark JSON file.

Usage:
    python3 scripts/perf_report.py [JSON] [--out-dir DIR] [--markdown FILE]

    JSON        Google Benchmark output (--benchmark_format=json or --benchmark_out=...),
                default bench-results/latest.json (relative to the repository root)
    --out-dir   where the plots go, default docs/perf (relative to the repository root)
    --markdown  also write the Markdown report to FILE (it is always printed to stdout); the
                report links the PNG plots relative to FILE's folder (without it: the current one)

Rows: the median aggregates (run with --benchmark_repetitions=N
--benchmark_report_aggregates_only=true); a file of plain iteration rows is reduced to the
median per name here. FFN decode rows are recognised by their name,
    cpu_ffn/<dtype>/<shape>/t<threads>/dense
    cpu_ffn/<dtype>/<shape>/t<threads>/<random|clustered|coalesced|gathered>_a<activity>
and get, per (shape, threads):
  - a summary table under "## Summary: speed-up over dense", heading "### <shape>, <n> thread(s)":
    one row per dtype (f32, f16, bf16, q8_0, q4_0, then the others sorted, e.g. q4_0_x16),
        | dtype | dense ms | pct_of_read | resident_ratio | a=0.6 | a=0.4 | a=0.2 | a=0.1 | a=0.05 | crossover |
    dense ms, pct_of_read (in percent) and resident_ratio ("1.00x") of the dense row; at each a
    the random row's speedup and pct_of_ideal as a fraction, "1.23x (0.95)" ("1.23x" without
    pct_of_ideal); crossover: the smallest a among the random rows whose path counter is 1 (the
    op read every row), "none" when no random row has path 1; "-" for anything missing (no such
    row or counter; crossover: no random row has a path counter);
  - a table of every row, "## FFN decode, <shape>, <n> thread(s)";
  - a plot, ffn_speedup_<shape>_t<threads>.png and .svg in --out-dir, linked (PNG) from the
    report: speed-up over dense against the activity a on a linear y axis from 0 (the values lie
    between about 0.5 and 3, where a log scale only squeezes the curves together); per dtype a
    line with filled circles for the random set and hollow markers for the clustered (square),
    coalesced (triangle) and gathered (diamond) sets; the ideal 3/(1+2a) dashed black, dense
    (1.0) a grey horizontal line; legend right of the axes. Each drawn series is an SVG group
    with the id random_<dtype>, <set>_<dtype>, ideal or dense.
Every other row goes to one generic table with all its counters. The counters pct_of_ideal and
pct_of_read are ratios (1.0 = 100%) and are shown in percent in the row tables; a value above 2
is taken to be a percentage already.

matplotlib is optional: without it the tables are still written (stdout and --markdown), the
report says that no plot was drawn and links none, one note goes to stderr (Debian: apt-get
install python3-matplotlib, then run this script with /usr/bin/python3) and the exit status
stays 0; plot files already in --out-dir are left as they are.

Exit status: 0, or 2 with a one-line error on stderr when the file is missing, is not JSON or
holds no benchmark rows. The output depends only on the JSON and on whether matplotlib is there
(same input, same Markdown, PNG and SVG bytes: no dates or versions in the files, the SVG ids
salted with a fixed svg.hashsalt).
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0"]
SETS = ["random", "clustered", "coalesced", "gathered"]
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
# Hollow markers for the non-random index sets (the random set: a line with filled circles).
SET_MARKERS = {"clustered": "s", "coalesced": "^", "gathered": "D"}
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


SUMMARY_ACTIVITIES = [0.6, 0.4, 0.2, 0.1, 0.05]


def frac(v):
    """A ratio counter as a fraction with 2 decimals (a value above 2 is taken to be a percentage)."""
    if v is None or not math.isfinite(v):
        return None
    return "%.2f" % (v / 100.0 if abs(v) > 2 else v)


def speedup_cell(row):
    """'1.23x (0.95)': the speed-up over dense and the fraction of the ideal; '1.23x' without
    pct_of_ideal, '-' without the row or its speedup counter."""
    s = row["counters"].get("speedup") if row else None
    if s is None or not math.isfinite(s):
        return "-"
    f = frac(row["counters"].get("pct_of_ideal"))
    return "%.2fx" % s if f is None else "%.2fx (%s)" % (s, f)


def crossover(random_rows):
    """The smallest activity whose random row reads every row (path counter 1), 'none' when no
    random row does, '-' when no random row has a path counter."""
    with_path = [r for r in random_rows if "path" in r["counters"]]
    if not with_path:
        return "-"
    dense = [r["activity"] for r in with_path if r["counters"]["path"] >= 0.5]
    return "%.2f" % min(dense) if dense else "none"


def summary_table(rows):
    """One row per dtype: the dense row's time, pct_of_read and resident_ratio, the random rows'
    speed-up at SUMMARY_ACTIVITIES, and the crossover."""
    out = ["| dtype | dense ms | pct_of_read | resident_ratio | "
           + " | ".join("a=%g" % a for a in SUMMARY_ACTIVITIES) + " | crossover |",
           "|---|" + "---:|" * (3 + len(SUMMARY_ACTIVITIES) + 1)]
    for d in sorted({r["dtype"] for r in rows}, key=dtype_key):
        mine = [r for r in rows if r["dtype"] == d]
        dense = next((r for r in mine if r["set"] == "dense"), None)
        random_rows = [r for r in mine if r["set"] == "random"]
        dc = dense["counters"] if dense else {}
        rr = dc.get("resident_ratio")
        cells = [md_cell(d), fmt(dense["ms"]) if dense else "-", pct(dc.get("pct_of_read")),
                 "-" if rr is None or not math.isfinite(rr) else "%.2fx" % rr]
        for a in SUMMARY_ACTIVITIES:
            cells.append(speedup_cell(next((r for r in random_rows if abs(r["activity"] - a) < 1e-9), None)))
        cells.append(crossover(random_rows))
        out.append("| " + " | ".join(cells) + " |")
    return out


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or None when matplotlib is missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "actsparse"  # the same SVG bytes for the same input
    import matplotlib.pyplot as plt
    return plt


def speedup_figure(plt, shape, threads, rows):
    """The speed-up plot of one (shape, threads): a linear y axis from 0 (the speed-ups lie
    between about 0.5 and the ideal's 3, where a log scale only squeezes the curves together)."""
    pts = [r for r in rows if r["set"] != "dense" and r["counters"].get("speedup") is not None]
    fig, ax = plt.subplots(figsize=(9.0, 5.0))
    a = [i / 100 for i in range(101)]
    ideal, = ax.plot(a, [3 / (1 + 2 * x) for x in a], color="#000000", linestyle="--", linewidth=1.5,
                     label="ideal 3/(1+2a)")
    ideal.set_gid("ideal")
    ax.axhline(1.0, color="#777777", linewidth=1.2, label="dense (1.0)").set_gid("dense")
    dtypes = sorted({r["dtype"] for r in pts}, key=dtype_key)
    for k, d in enumerate(dtypes):
        c = COLOURS[k % len(COLOURS)]
        mine = sorted((r for r in pts if r["dtype"] == d), key=lambda r: r["activity"])
        line = [r for r in mine if r["set"] == "random"]
        if line:
            drawn, = ax.plot([r["activity"] for r in line], [r["counters"]["speedup"] for r in line], color=c,
                             marker="o", markersize=4, linewidth=2, label=d)
            drawn.set_gid("random_" + d)
        else:  # only other sets: a legend entry for the colour
            ax.plot([], [], color=c, marker="o", markersize=4, linewidth=2, label=d)
        for s in SETS[1:]:
            other = [r for r in mine if r["set"] == s]
            if other:
                ax.scatter([r["activity"] for r in other], [r["counters"]["speedup"] for r in other],
                           marker=SET_MARKERS[s], s=36, facecolors="white", edgecolors=c, linewidths=1.5,
                           zorder=3).set_gid("%s_%s" % (s, d))
    for s in SETS[1:]:  # one legend entry per set present
        if any(r["set"] == s for r in pts):
            ax.scatter([], [], marker=SET_MARKERS[s], s=36, facecolors="white", edgecolors="#555555",
                       linewidths=1.5, label=s + " set")
    ax.set_xlim(-0.01, 1.01)  # the markers at a = 1 whole
    ax.set_ylim(0.0, max([3.0] + [r["counters"]["speedup"] for r in pts]) * 1.05)
    ax.set_xlabel("activity a (fraction of neurons kept)")
    ax.set_ylabel("speed-up over dense")
    ax.set_title("Sparse decode FFN, %s, %s: speed-up over dense" % (shape, thread_word(threads)))
    ax.grid(True, color="#e5e5e5")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=9)
    return fig


def save(plt, fig, out_dir, stem):
    """Writes out_dir/stem.png and out_dir/stem.svg without dates or versions (same input, same
    bytes); returns the PNG's path."""
    for ext, meta in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
        fig.savefig(os.path.join(out_dir, stem + "." + ext), dpi=120, bbox_inches="tight", metadata=meta)
    plt.close(fig)
    return os.path.join(out_dir, stem + ".png")


def report(path, out_dir, markdown):
    """Writes the plots (when matplotlib is there) and returns the Markdown text."""
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
    keys = sorted(ffn, key=lambda k: (k[0], k[1]))
    plt = pyplot() if ffn else None
    if not ffn:
        md += ["No FFN decode rows (cpu_ffn/...) in this file; no plot written.", ""]
    elif plt is None:
        print("perf_report: note: matplotlib is not installed for %s; tables written, plots skipped "
              "(Debian: apt-get install python3-matplotlib, then run this script with /usr/bin/python3)"
              % sys.executable, file=sys.stderr)
        md += ["No plots: matplotlib is not installed for the Python that ran scripts/perf_report.py.", ""]
    if ffn:
        md += ["## Summary: speed-up over dense", "",
               "Per dtype: the dense row's median time, its read bandwidth against the fastest read pattern "
               "(pct_of_read) and the bytes a layer holds against the dense weights' (resident_ratio); then the "
               "random rows' speed-up over dense at activity a, with the fraction of the ideal 3/(1+2a) in "
               "parentheses; crossover: the smallest a whose random row reads every row (path 1).", ""]
        for shape, threads in keys:
            md += ["### %s, %s" % (shape, thread_word(threads)), ""] + summary_table(ffn[(shape, threads)]) + [""]
    if plt is not None:
        os.makedirs(out_dir, exist_ok=True)
    for shape, threads in keys:
        md += ["## FFN decode, %s, %s" % (shape, thread_word(threads)), ""]
        md += ffn_table(ffn[(shape, threads)])
        md += [""]
        if plt is not None:
            png = save(plt, speedup_figure(plt, shape, threads, ffn[(shape, threads)]), out_dir,
                       "ffn_speedup_%s_t%d" % (shape, threads))
            link = os.path.relpath(os.path.abspath(png), link_base).replace(os.sep, "/")
            md += ["![%s FFN speed-up, %s](%s)" % (shape, thread_word(threads), link), ""]
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
