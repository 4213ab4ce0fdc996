#!/usr/bin/env python3
"""The model demo's plots as SVG (standard library only).

Usage:
    python3 scripts/demo_plots.py [DEMO_JSON] [--bench JSON] [--out-dir DIR]

    DEMO_JSON   the demo's rows, default demo-results/latest.json
    --bench     benchmark JSON (./dev bench), default bench-results/latest.json; when it
                exists and holds FFN decode rows, the speed-up plot is drawn from it
    --out-dir   default: the folder of DEMO_JSON

Writes kl_vs_kept.svg (mean KL(dense || policy) against the kept fraction, log scale, one
line per scorer family) and, with benchmark rows, speedup_vs_activity.svg (the decode FFN
speed-up over dense against activity, with the ideal 3/(1+2a); 7b shape, one thread, or
the first shape present). Exit status 2 with a one-line error when DEMO_JSON is unusable.
"""
import argparse
import json
import math
import os
import sys
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf_report  # noqa: E402  (the benchmark plot)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLOURS = perf_report.COLOURS


def series_of(rows):
    """{label: [(kept, kl), ...]} for every sparse family, sorted by kept fraction."""
    out = {}
    for r in rows:
        if r.get("family") in (None, "dense", "token_sparse"):
            continue
        if r.get("kl") is None or r.get("kept_fraction") is None:
            continue
        label = "%s (%s)" % (r["scorer"], r["family"])
        out.setdefault(label, []).append((r["kept_fraction"], r["kl"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def kl_plot(rows, title):
    W, H, x0, x1, y0, y1 = 820, 460, 70, 560, 48, 400
    series = series_of(rows)
    kls = [kl for pts in series.values() for _, kl in pts if kl > 0]
    lo = math.floor(math.log10(min(kls))) if kls else -5
    hi = math.ceil(math.log10(max(kls))) if kls else 0
    hi = max(hi, lo + 1)
    sx = lambda a: x0 + a * (x1 - x0)
    sy = lambda v: y1 - (math.log10(max(v, 10.0 ** lo)) - lo) / (hi - lo) * (y1 - y0)
    o = perf_report.svg_header(W, H, title, (x0 + x1) // 2) + perf_report.x_grid(sx, y0, y1)
    for e in range(lo, hi + 1):
        y = sy(10.0 ** e)
        o.append('<line x1="%d" y1="%.2f" x2="%d" y2="%.2f" stroke="#e5e5e5"/>' % (x0, y, x1, y))
        o.append('<text x="%d" y="%.2f" text-anchor="end">1e%d</text>' % (x0 - 6, y + 4, e))
    for ref in (0.01, 0.05):
        if 10.0 ** lo <= ref <= 10.0 ** hi:
            o.append('<line x1="%d" y1="%.2f" x2="%d" y2="%.2f" stroke="#999999" stroke-dasharray="4 4"/>'
                     % (x0, sy(ref), x1, sy(ref)))
            o.append('<text x="%d" y="%.2f" fill="#666666">KL %.2f</text>' % (x0 + 4, sy(ref) - 4, ref))
    o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333333"/>' % (x0, y0, x1 - x0, y1 - y0))
    o.append('<text x="%d" y="%d" text-anchor="middle">kept fraction</text>' % ((x0 + x1) // 2, y1 + 40))
    o.append('<text x="18" y="%d" text-anchor="middle" transform="rotate(-90 18 %d)">mean KL(dense || policy)</text>'
             % ((y0 + y1) // 2, (y0 + y1) // 2))
    for k, (label, pts) in enumerate(series.items()):
        c = COLOURS[k % len(COLOURS)]
        o.append('<polyline class="series" data-label="%s" points="%s" fill="none" stroke="%s" stroke-width="2"/>'
                 % (escape(label), " ".join("%.2f,%.2f" % (sx(a), sy(v)) for a, v in pts), c))
        for a, v in pts:
            o.append('<circle cx="%.2f" cy="%.2f" r="3.5" fill="%s"/>' % (sx(a), sy(v), c))
        y = y0 + 8 + 20 * k
        o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>' % (x1 + 20, y, x1 + 44, y, c))
        o.append('<text x="%d" y="%d">%s</text>' % (x1 + 52, y + 4, escape(label)))
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("demo", nargs="?", default=os.path.join(REPO, "demo-results", "latest.json"))
    p.add_argument("--bench", default=os.path.join(REPO, "bench-results", "latest.json"))
    p.add_argument("--out-dir")
    a = p.parse_args(argv)
    try:
        with open(a.demo, encoding="utf-8") as f:
            demo = json.load(f)
        rows = demo["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("demo_plots: cannot read %s: %s" % (a.demo, e), file=sys.stderr)
        return 2
    out = a.out_dir or os.path.dirname(os.path.abspath(a.demo))
    os.makedirs(out, exist_ok=True)
    written = []
    path = os.path.join(out, "kl_vs_kept.svg")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(kl_plot(rows, "%s: KL against kept fraction" % os.path.basename(demo.get("model", "model"))))
    written.append(path)
    if os.path.exists(a.bench):
        try:
            _, brows, _ = perf_report.load(a.bench)
            ffn, _ = perf_report.split_rows(brows)
        except perf_report.ReportError:
            ffn = {}
        if ffn:
            key = ("7b", 1) if ("7b", 1) in ffn else sorted(ffn)[0]
            path = os.path.join(out, "speedup_vs_activity.svg")
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(perf_report.svg_plot(key[0], key[1], ffn[key]))
            written.append(path)
    for w in written:
        print("wrote", os.path.relpath(w, os.getcwd()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
