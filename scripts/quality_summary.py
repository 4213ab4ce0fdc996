#!/usr/bin/env python3
"""The quality summary of a model demo run as Markdown (standard library only).

Usage:
    python3 scripts/quality_summary.py [DEMO_JSON]      (default demo-results/latest.json)

Prints, from the demo's rows:
  1. per scorer family, the kept fraction at which mean KL(dense || policy) first exceeds
     0.01 and 0.05, going from keep-all down (linear interpolation of log KL between the
     two measured points around the crossing; "> x" when even the densest point is above,
     "< x" when even the sparsest is below);
  2. weight-aware against magnitude (and the gate-only weight-aware score) at equal kept
     fractions;
  3. the token-sparse presets' kept-token fraction per layer;
  4. the full table.
"""
import json
import math
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def crossing(points, level):
    """Kept fraction where KL first exceeds `level`, walking from the largest kept fraction down."""
    pts = sorted(points, reverse=True)  # (kept, kl), densest first
    if not pts:
        return "-"
    if pts[0][1] > level:
        return "> %.2f" % pts[0][0]
    for (k0, v0), (k1, v1) in zip(pts, pts[1:]):
        if v1 > level:
            if v0 <= 0:
                return "%.2f" % k1
            t = (math.log(level) - math.log(v0)) / (math.log(v1) - math.log(v0))
            return "%.2f" % (k0 + t * (k1 - k0))
    return "< %.2f" % pts[-1][0]


def main(argv):
    path = argv[1] if len(argv) > 1 else os.path.join(REPO, "demo-results", "latest.json")
    try:
        with open(path, encoding="utf-8") as f:
            demo = json.load(f)
        rows = demo["rows"]
    except (OSError, ValueError, KeyError) as e:
        print("quality_summary: cannot read %s: %s" % (path, e), file=sys.stderr)
        return 2
    out = ["Source: `%s`, %s sequences x %s tokens." % (os.path.basename(path), demo.get("sequences"),
                                                        demo.get("length")), ""]
    families = {}
    for r in rows:
        if r["family"] in ("dense", "token_sparse"):
            continue
        families.setdefault("%s (%s)" % (r["scorer"], r["family"]), []).append((r["kept_fraction"], r["kl"]))
    out += ["| scorer (selector) | kept where KL > 0.01 | kept where KL > 0.05 | bytes read at KL 0.05 |",
            "|---|---|---|---|"]
    by_bytes = {}
    for r in rows:
        by_bytes.setdefault("%s (%s)" % (r["scorer"], r["family"]), []).append((r["bytes_fraction"], r["kl"]))
    for name, pts in sorted(families.items()):
        out.append("| %s | %s | %s | %s |" % (name, crossing(pts, 0.01), crossing(pts, 0.05),
                                               crossing(by_bytes[name], 0.05)))
    out += ["", "Top-k at equal kept fraction, mean KL (lower is better):", "",
            "| keep | magnitude | weight_aware | gate-only weight_aware |", "|---|---|---|---|"]
    kl = {r["policy"]: r["kl"] for r in rows}
    for keep in ("90", "75", "50", "35", "25"):
        cells = [kl.get("%s top_k %s%%" % (s, keep)) for s in ("magnitude", "weight_aware", "gate weight_aware")]
        out.append("| %s%% | %s |" % (keep, " | ".join("-" if c is None else "%.5f" % c for c in cells)))
    tok = [r for r in rows if r["family"] == "token_sparse"]
    if tok:
        layers = len(tok[0].get("kept_per_layer", []))
        out += ["", "Token-sparse prefill, kept-token fraction per layer:", "",
                "| preset | " + " | ".join("layer %d" % l for l in range(layers)) + " | all | KL |",
                "|---|" + "---|" * (layers + 2)]
        for r in tok:
            out.append("| %s | %s | %.3f | %.4f |" % (r["policy"], " | ".join("%.3f" % v for v in r["kept_per_layer"]),
                                                      r["kept_fraction"], r["kl"]))
    out += ["", "| policy | kept | bytes | KL | top-1 | ppl |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append("| %s | %.3f | %.3f | %.5f | %.3f | %.3f |" % (r["policy"], r["kept_fraction"], r["bytes_fraction"],
                                                                  r["kl"], r["top1"], r["ppl"]))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
