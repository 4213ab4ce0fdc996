#!/usr/bin/env python3
"""The model demo's plots, drawn with matplotlib, each as PNG and SVG.

Usage:
    python3 scripts/demo_plots.py [DEMO_JSON] [--bench JSON] [--out-dir DIR]

    DEMO_JSON   the demo's rows, default demo-results/latest.json
    --bench     benchmark JSON (./dev bench), default bench-results/latest.json; when it
                exists and holds FFN decode rows, the speed-up plot is drawn from it
    --out-dir   default: the folder of DEMO_JSON

Writes kl_vs_kept.png and .svg (mean KL(dense || policy) against the kept fraction, log
scale, one line per scorer family), kl_vs_bytes.png and .svg (KL against the honest fraction of
FFN weight bytes read, every policy, the calibrated methods drawn bold) and, with benchmark rows, speedup_vs_activity.png and
.svg (the decode FFN speed-up over dense against activity, with the ideal 3/(1+2a); 7b shape,
one thread, or the first shape present) and, with MoE rows, kl_vs_experts.png and .svg (KL against
the mean experts per token of the MoEfied model: fixed top-k, adaptive top-k, progressive) and, with KV rows,
kl_vs_memory.png and .svg (KL against the KV cache memory held: uniform formats, FIFO, heavy hitters) and,
with the ReLU-fied model's rows, relu_side_by_side.png and .svg (KL against bytes read for the same
policies on the SwiGLU model and on the ReLU-fied one, each against its own dense model, exact
gating marked, the ReLU-fication's own cost drawn as a line).
Each line of a plot is an SVG group with the id
series_<n>. Exit status 2 with a one-line error when DEMO_JSON is unusable, 3 when matplotlib
is missing (Debian: apt-get install python3-matplotlib, then run it with /usr/bin/python3).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_report  # noqa: E402  (reads the benchmark JSON)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLOURS = perf_report.COLOURS
# Hollow markers for the benchmark's non-random index sets (filled circles: random).
SET_MARKERS = {"random": "o", "clustered": "s", "coalesced": "^", "gathered": "D"}


def series_of(rows):
    """{label: [(kept, kl), ...]} for every sparse family, sorted by kept fraction."""
    out = {}
    for r in rows:
        if r.get("family") in (None, "dense", "token_sparse", "calibrated", "moe", "kv", "quantized", "relu"):
            continue
        if r.get("kl") is None or r.get("kept_fraction") is None:
            continue
        label = "%s (%s)" % (r["scorer"], r["family"])
        out.setdefault(label, []).append((r["kept_fraction"], r["kl"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def save(plt, fig, out, stem):
    """Writes out/stem.png and out/stem.svg; returns both paths."""
    paths = []
    for ext, meta in (("png", {"Software": None}), ("svg", {"Date": None, "Creator": None})):
        path = os.path.join(out, stem + "." + ext)
        fig.savefig(path, dpi=120, bbox_inches="tight", metadata=meta)
        paths.append(path)
    plt.close(fig)
    return paths


def kl_plot(plt, rows, title):
    series = series_of(rows)
    kls = [kl for pts in series.values() for _, kl in pts if kl > 0]
    floor = 10.0 ** math.floor(math.log10(min(kls))) if kls else 1e-5
    fig, ax = plt.subplots(figsize=(9.5, 5.0))
    for k, (label, pts) in enumerate(series.items()):
        line, = ax.plot([a for a, _ in pts], [max(v, floor) for _, v in pts], marker="o", markersize=4,
                        linewidth=2, color=COLOURS[k % len(COLOURS)], label=label)
        line.set_gid("series_%d" % k)
    for ref in (0.01, 0.05):
        ax.axhline(ref, color="#999999", linestyle="--", linewidth=1)
        ax.annotate("KL %.2f" % ref, (0.005, ref), xycoords=("axes fraction", "data"), color="#666666",
                    va="bottom", fontsize=9)
    ax.set_yscale("log")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("kept fraction")
    ax.set_ylabel("mean KL(dense || policy)")
    ax.set_title(title)
    ax.grid(True, which="major", color="#e5e5e5")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=9)
    return fig


def bytes_series(rows):
    """{(label, calibrated): [(bytes, kl), ...]}: uniform families by scorer, calibrated ones by method."""
    out = {}
    for r in rows:
        if r.get("family") in (None, "dense", "token_sparse", "moe", "kv", "quantized", "relu") or r.get("kl") is None:
            continue
        cal = r["family"] == "calibrated"
        label = ("calibrated " + r["scorer"]) if cal else "%s (%s)" % (r["scorer"], r["family"])
        out.setdefault((label, cal), []).append((r["bytes_fraction"], r["kl"]))
    return {k: sorted(v) for k, v in sorted(out.items(), key=lambda kv: (kv[0][1], kv[0][0]))}


def kl_bytes_plot(plt, rows, title):
    series = bytes_series(rows)
    kls = [kl for pts in series.values() for _, kl in pts if kl > 0]
    floor = 10.0 ** math.floor(math.log10(min(kls))) if kls else 1e-5
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    markers = "osD^vP*X"
    c = 0
    for k, ((label, cal), pts) in enumerate(series.items()):
        if cal:  # the calibrated methods: each its own colour and marker, drawn over the uniform rows
            style = dict(marker=markers[c % len(markers)], markersize=5, linewidth=2.2, zorder=3,
                         color=COLOURS[c % len(COLOURS)], linestyle="-" if c < len(COLOURS) else "--")
            c += 1
        else:
            style = dict(marker=".", markersize=4, linewidth=1, color="#9a9a9a", linestyle=":", zorder=2)
        line, = ax.plot([b for b, _ in pts], [max(v, floor) for _, v in pts], label=label, **style)
        line.set_gid("series_%d" % k)
    for b in (0.9, 5.0 / 6.0, 0.75, 2.0 / 3.0):
        ax.axvline(b, color="#cccccc", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlim(0.45, 1.0)
    ax.set_xlabel("FFN weight bytes read per decode token (honest: predictors and all of up counted)")
    ax.set_ylabel("mean KL(dense || policy)")
    ax.set_title(title)
    ax.grid(True, which="major", color="#e5e5e5")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=8)
    return fig


RELU_KINDS = ("magnitude top_k", "weight_aware top_k", "magnitude cumulative_mass", "calibrated budgets",
              "calibrated budgets+refine")


def relu_kind(policy):
    """The policy's kind without its parameter and the "relu " prefix: "magnitude top_k 25%" -> "magnitude top_k",
    "calibrated budgets+refine @ 0.4" -> "calibrated budgets+refine"; None for other rows."""
    name = policy[len("relu "):] if policy.startswith("relu ") else policy
    name = name.split(" @ ")[0]
    for kind in RELU_KINDS:
        if name == kind or (name.startswith(kind + " ") and kind != "calibrated budgets"):
            return kind
    return None


def relu_series(rows):
    """({kind: [(bytes, kl vs own dense)]} of the SwiGLU model, the same of the ReLU model, the exact
    gating row, the relu dense row); ({}, {}, None, None) without ReLU rows."""
    swiglu, relu, exact, dense = {}, {}, None, None
    for r in rows:
        if r.get("family") == "relu":
            if r["policy"] == "relu exact gating":
                exact = r
            elif r["policy"] == "relu dense":
                dense = r
            elif relu_kind(r["policy"]) and r.get("kl_vs_relu_dense") is not None:
                relu.setdefault(relu_kind(r["policy"]), []).append((r["bytes_fraction"], r["kl_vs_relu_dense"]))
        elif r.get("family") not in ("quantized", "moe", "kv") and relu_kind(r["policy"]) and r.get("kl") is not None:
            swiglu.setdefault(relu_kind(r["policy"]), []).append((r["bytes_fraction"], r["kl"]))
    if not relu:
        return {}, {}, None, None
    swiglu = {k: sorted(v) for k, v in swiglu.items() if k in relu}
    return swiglu, {k: sorted(v) for k, v in relu.items()}, exact, dense


def relu_plot(plt, rows, title):
    swiglu, relu, exact, dense = relu_series(rows)
    kls = [kl for s in (swiglu, relu) for pts in s.values() for _, kl in pts if kl > 0]
    if dense is not None and dense["kl"] > 0:
        kls.append(dense["kl"])
    floor = 10.0 ** math.floor(math.log10(min(kls))) if kls else 1e-5
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 5.0), sharey=True)
    k = 0
    for ax, series, name in ((axes[0], swiglu, "SwiGLU (original)"), (axes[1], relu, "ReLU-fied")):
        for kind in RELU_KINDS:
            if kind not in series:
                continue
            c = RELU_KINDS.index(kind)
            pts = series[kind]
            line, = ax.plot([b for b, _ in pts], [max(v, floor) for _, v in pts], marker="osD^v"[c], markersize=5,
                            linewidth=2, color=COLOURS[c % len(COLOURS)], label=kind)
            line.set_gid("series_%d" % k)
            k += 1
        ax.set_title(name)
        ax.set_yscale("log")
        ax.set_xlim(0.3, 1.02)
        ax.set_xlabel("FFN weight bytes read per decode token")
        ax.grid(True, which="major", color="#e5e5e5")
    if exact is not None:
        pt, = axes[1].plot([exact["bytes_fraction"]], [floor], marker="*", markersize=14, color="#000000",
                           linestyle="none", label="exact gating (KL 0, drawn at the floor)")
        pt.set_gid("series_%d" % k)
        axes[1].annotate("exact gating: %.1f%% of neurons\n(lossless)" % (100 * exact["kept_fraction"]),
                         (exact["bytes_fraction"], floor), textcoords="offset points", xytext=(8, 10), fontsize=9)
    if dense is not None and dense["kl"] > 0:
        for ax in axes:
            ax.axhline(dense["kl"], color="#666666", linestyle="--", linewidth=1)
        axes[1].annotate("ReLU-fied dense vs original: KL %.3f" % dense["kl"], (0.31, dense["kl"]), va="bottom",
                         fontsize=9, color="#444444")
    axes[0].set_ylabel("mean KL(own dense || policy)")
    fig.suptitle(title)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=9)
    return fig


def moe_series(rows):
    """{routing: [(experts_per_token, kl, policy), ...]} of the MoE rows, by the router's rule (scorer)."""
    out = {}
    for r in rows:
        if r.get("family") != "moe" or r.get("kl") is None or r.get("experts_per_token") is None:
            continue
        out.setdefault(r["scorer"], []).append((r["experts_per_token"], r["kl"], r["policy"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def kl_experts_plot(plt, rows, title):
    series = moe_series(rows)
    # The all-experts row is the dense FFN up to the f32 summation order (KL ~1e-12): points below
    # 1e-6 are drawn at 1e-6 with their KL written next to them.
    kls = [kl for pts in series.values() for _, kl, _ in pts if kl > 0]
    floor = max(10.0 ** math.floor(math.log10(min(kls))) if kls else 1e-6, 1e-6)
    experts = max((e for pts in series.values() for e, _, _ in pts), default=8.0)
    fig, ax = plt.subplots(figsize=(9.5, 5.0))
    markers = "osD^v"
    for k, (label, pts) in enumerate(series.items()):
        progressive = "progressive" in label  # schedules of one mean: points, not a line
        line, = ax.plot([e for e, _, _ in pts], [max(v, floor) for _, v, _ in pts], marker=markers[k % len(markers)],
                        markersize=6 if progressive else 4, linewidth=0 if progressive else 2,
                        color=COLOURS[k % len(COLOURS)], label=label)
        line.set_gid("series_%d" % k)
        if progressive:
            for e, v, name in pts:
                ax.annotate(name.replace("moe progressive ", ""), (e, max(v, floor)), textcoords="offset points",
                            xytext=(6, 4 if pts.index((e, v, name)) == 0 else -12), fontsize=8)
        for e, v, _ in pts:
            if v < floor:
                ax.annotate("KL %.2g" % v, (e, floor), textcoords="offset points", xytext=(-8, 8), ha="right",
                            fontsize=8)
    for ref in (0.01, 0.05):
        ax.axhline(ref, color="#999999", linestyle="--", linewidth=1)
        ax.annotate("KL %.2f" % ref, (0.005, ref), xycoords=("axes fraction", "data"), color="#666666",
                    va="bottom", fontsize=9)
    ax.set_yscale("log")
    ax.set_xlim(0.0, experts + 0.5)
    ax.set_xlabel("mean experts per token (of %d)" % round(experts))
    ax.set_ylabel("mean KL(dense || policy)")
    ax.set_title(title)
    ax.grid(True, which="major", color="#e5e5e5")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=9)
    return fig


def kv_kind(policy):
    """The KV row's placement: uniform (one format), fifo (the newest rows full) or heavy (importance)."""
    for kind in ("fifo", "heavy"):
        if " %s " % kind in policy:
            return kind
    return "uniform"


def kv_series(rows):
    """{kind: [(memory_fraction, kl, policy), ...]} of the KV rows."""
    out = {}
    for r in rows:
        if r.get("family") != "kv" or r.get("kl") is None or r.get("memory_fraction") is None:
            continue
        out.setdefault(kv_kind(r["policy"]), []).append((r["memory_fraction"], r["kl"], r["policy"]))
    return {k: sorted(out[k]) for k in ("uniform", "fifo", "heavy") if k in out}


def kl_memory_plot(plt, rows, title):
    series = kv_series(rows)
    kls = [kl for pts in series.values() for _, kl, _ in pts if kl > 0]
    floor = max(10.0 ** math.floor(math.log10(min(kls))) if kls else 1e-7, 1e-7)
    fig, ax = plt.subplots(figsize=(10.5, 5.5))
    markers = {"uniform": "o", "fifo": "s", "heavy": "D"}
    for k, (kind, pts) in enumerate(series.items()):
        drawn = ax.scatter([m for m, _, _ in pts], [max(v, floor) for _, v, _ in pts], marker=markers[kind],
                           s=36, color=COLOURS[k % len(COLOURS)], label=kind, zorder=3)
        drawn.set_gid("series_%d" % k)
        for m, v, name in pts:
            ax.annotate(name.replace("kv ", "", 1), (m, max(v, floor)), textcoords="offset points", xytext=(5, 3),
                        fontsize=7, color=COLOURS[k % len(COLOURS)])
    ax.axhline(0.005, color="#999999", linestyle="--", linewidth=1)
    ax.annotate("KL 0.005", (0.005, 0.005), xycoords=("axes fraction", "data"), color="#666666", va="bottom",
                fontsize=9)
    ax.axvline(0.2, color="#bbbbbb", linestyle=":", linewidth=1)
    ax.set_yscale("log")
    ax.set_xlim(0.0, max((m for pts in series.values() for m, _, _ in pts), default=0.5) * 1.35)
    ax.set_xlabel("KV cache memory held / an f32 cache's (scales and minimums included)")
    ax.set_ylabel("mean KL(dense || policy)")
    ax.set_title(title)
    ax.grid(True, which="major", color="#e5e5e5")
    ax.legend(loc="upper right", frameon=False, fontsize=9)
    return fig


def speedup_plot(plt, shape, threads, rows):
    pts = [r for r in rows if r["set"] != "dense" and r["counters"].get("speedup") is not None]
    fig, ax = plt.subplots(figsize=(9.0, 5.0))
    a = [i / 100 for i in range(101)]
    ax.plot(a, [3 / (1 + 2 * x) for x in a], color="#555555", linestyle="--", linewidth=1.5,
            label="ideal 3/(1+2a)")
    ax.axhline(1.0, color="#000000", linewidth=1, label="dense (1.0)")
    dtypes = sorted({r["dtype"] for r in pts}, key=perf_report.dtype_key)
    for k, d in enumerate(dtypes):
        c = COLOURS[k % len(COLOURS)]
        mine = sorted((r for r in pts if r["dtype"] == d), key=lambda r: r["activity"])
        line = [r for r in mine if r["set"] == "random"]
        if line:
            drawn, = ax.plot([r["activity"] for r in line], [r["counters"]["speedup"] for r in line], color=c,
                             marker="o", markersize=4, linewidth=2, label=d)
            drawn.set_gid("series_%d" % k)
        for s in perf_report.SETS[1:]:
            other = [r for r in mine if r["set"] == s]
            if other:
                ax.scatter([r["activity"] for r in other], [r["counters"]["speedup"] for r in other],
                           marker=SET_MARKERS.get(s, "x"), facecolors="white", edgecolors=c, zorder=3)
    for s in perf_report.SETS[1:]:  # one legend entry per set present
        if any(r["set"] == s for r in pts):
            ax.scatter([], [], marker=SET_MARKERS.get(s, "x"), facecolors="white", edgecolors="#555555",
                       label=s + " set")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(bottom=0.0)
    ax.set_xlabel("activity a (fraction of neurons kept)")
    ax.set_ylabel("speed-up over dense")
    ax.set_title("%s FFN decode, %s: speed-up vs activity" % (shape, perf_report.thread_word(threads)))
    ax.grid(True, color="#e5e5e5")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=9)
    return fig


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("demo", nargs="?", default=os.path.join(REPO, "demo-results", "latest.json"))
    p.add_argument("--bench", default=os.path.join(REPO, "bench-results", "latest.json"))
    p.add_argument("--out-dir")
    a = p.parse_args(argv)
    plt = perf_report.pyplot()
    if plt is None:
        print("demo_plots: matplotlib is not installed for %s; on Debian: apt-get install python3-matplotlib, "
              "then run this script with /usr/bin/python3" % sys.executable, file=sys.stderr)
        return 3
    try:
        with open(a.demo, encoding="utf-8") as f:
            demo = json.load(f)
        rows = demo["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("demo_plots: cannot read %s: %s" % (a.demo, e), file=sys.stderr)
        return 2
    out = a.out_dir or os.path.dirname(os.path.abspath(a.demo))
    os.makedirs(out, exist_ok=True)
    title = "%s: KL against kept fraction" % os.path.basename(demo.get("model", "model"))
    written = save(plt, kl_plot(plt, rows, title), out, "kl_vs_kept")
    written += save(plt, kl_bytes_plot(plt, rows, "%s: KL against bytes read (calibrated methods bold)" %
                                       os.path.basename(demo.get("model", "model"))), out, "kl_vs_bytes")
    if moe_series(rows):
        written += save(plt, kl_experts_plot(plt, rows, "%s MoEfied: KL against experts per token" %
                                             os.path.basename(demo.get("model", "model"))), out, "kl_vs_experts")
    if kv_series(rows):
        written += save(plt, kl_memory_plot(plt, rows, "%s: KV cache in tiered stores, %s tokens: KL against memory" % (
            os.path.basename(demo.get("model", "model")), demo.get("kv_length", "?"))), out, "kl_vs_memory")
    if relu_series(rows)[1]:
        written += save(plt, relu_plot(plt, rows, "%s: the same policies on the SwiGLU model and its ReLU-fied copy" %
                                       os.path.basename(demo.get("model", "model"))), out, "relu_side_by_side")
    if os.path.exists(a.bench):
        try:
            _, brows, _ = perf_report.load(a.bench)
            ffn, _ = perf_report.split_rows(brows)
        except perf_report.ReportError:
            ffn = {}
        if ffn:
            key = ("7b", 1) if ("7b", 1) in ffn else sorted(ffn)[0]
            written += save(plt, speedup_plot(plt, key[0], key[1], ffn[key]), out, "speedup_vs_activity")
    for w in written:
        print("wrote", os.path.relpath(w, os.getcwd()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
