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
  4. calibrated rows against uniform ones at equal bytes: for each byte budget b, the best
     uniform FFN row that reads no more than b (top-k, cumulative mass, CATS; TEAL against its
     own calibrated rows), every calibrated method's row, and the best calibrated row's KL as a
     share of the best uniform one's; then what the calibration measured (the tier predictor's
     held-out accuracy, the low-rank predictors' precision and recall, spans per step under the
     neuron orders, the time of each stage);
  5. the MoE rows (the dense FFN split into experts by MoEfication, a fitted linear router): per
     row the experts per token, bytes, KL, top-1 and perplexity, the best uniform neuron-sparse
     row that reads no more bytes, and the router's quality (true contribution mass it captures
     against the true top k);
  6. the quantized rows (the FFN weights in q8_0 / q4_0): per row KL and top-1 against the f32
     dense model and against the dense model of the same dtype, next to the f32 row of the same
     policy;
  7. the ReLU-fied model's rows: per row kept, bytes, KL and top-1 against the original (SwiGLU)
     dense model and against the ReLU model's own dense model, the neurons active per layer under
     exact gating, and beside each row the SwiGLU model's row of the same policy;
  8. the full table.
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


# The byte budgets of the calibrated rows: labels as the row names give them, and their values.
BUDGETS = [("0.9", 0.9), ("0.833", 5.0 / 6.0), ("0.75", 0.75), ("0.667", 2.0 / 3.0)]
UNIFORM_FFN = ("top_k", "cumulative_mass", "cats")


def best(rows, limit):
    """The row of lowest KL among rows that read at most `limit` (None when none does)."""
    fit = [r for r in rows if r["bytes_fraction"] <= limit + 1e-6]
    return min(fit, key=lambda r: r["kl"]) if fit else None


def calibrated_sections(demo, rows):
    cal = [r for r in rows if r["family"] == "calibrated"]
    if not cal:
        return []
    methods = []
    for r in cal:
        if r["scorer"] not in methods:
            methods.append(r["scorer"])
    ffn_methods = [m for m in methods if m != "teal"]
    out = ["", "Calibrated against uniform at equal bytes (mean KL; a row counts for b when it reads at most b):", "",
           "| b | best uniform FFN row | " + " | ".join(ffn_methods) + " | best calibrated / best uniform |",
           "|---|---|" + "---|" * (len(ffn_methods) + 1)]
    for label, b in BUDGETS:
        uni = best([r for r in rows if r["family"] in UNIFORM_FFN], b)
        mine = [r for r in cal if r["policy"].endswith("@ " + label) and r["scorer"] != "teal"]
        cells = []
        for m in ffn_methods:
            r = [x for x in mine if x["scorer"] == m]
            cells.append("%.5f (%.3f)" % (r[0]["kl"], r[0]["bytes_fraction"]) if r else "-")
        top = best(mine, b)
        ratio = "%.2f" % (top["kl"] / uni["kl"]) if top and uni and uni["kl"] > 0 else "-"
        out.append("| %s | %s | %s | %s |" % (
            label, "%.5f (%s, %.3f)" % (uni["kl"], uni["policy"], uni["bytes_fraction"]) if uni else "-",
            " | ".join(cells), ratio))
    teal = [r for r in rows if r["family"] == "teal"]
    cteal = [r for r in cal if r["scorer"] == "teal"]
    if teal and cteal:
        out += ["", "TEAL (all seven projections input-sparse; bytes: the FFN's share) uniform against calibrated:", "",
                "| b | best uniform TEAL row | calibrated TEAL |", "|---|---|---|"]
        for label, b in BUDGETS:
            uni = best(teal, b)
            c = [r for r in cteal if r["policy"].endswith("@ " + label)]
            out.append("| %s | %s | %s |" % (label, "%.5f (%.3f)" % (uni["kl"], uni["bytes_fraction"]) if uni else "-",
                                             "%.5f (%.3f)" % (c[0]["kl"], c[0]["bytes_fraction"]) if c else "-"))
    info = demo.get("calibration")
    if not info:
        return out
    if info.get("predictor"):
        out += ["", "Tier predictor (held-out tokens, %d parameters in all layers):" % info["predictor_parameters"], "",
                "| b | per-token KL budget | accuracy | too sparse | too dense |", "|---|---|---|---|---|"]
        for p in info["predictor"]:
            out.append("| %s | %.2g | %.3f | %.3f | %.3f |" % (p["target"], p["budget"], p["accuracy"], p["too_sparse"],
                                                              p["too_dense"]))
    if info.get("low_rank"):
        out += ["", "Low-rank gate predictors against exact gating at equal bytes (calibration sample):", "",
                "| rank | b | predictor bytes | rows kept (predicted / exact) | precision | recall |",
                "|---|---|---|---|---|---|"]
        for l in info["low_rank"]:
            out.append("| %d | %s | %.3f | %.3f / %.3f | %.3f | %.3f |" % (
                l["rank"], l["target"], l["predictor_bytes"], l["keep_predicted"], l["keep_exact"], l["precision"],
                l["recall"]))
    if info.get("spans"):
        out += ["", "Contiguous runs per FFN call of the rows budgets+refine reads, by neuron order:", "",
                "| b | order | W_up runs (rows) | W_down runs (rows) |", "|---|---|---|---|"]
        for sp in info["spans"]:
            out.append("| %s | %s | %.1f (%.1f) | %.1f (%.1f) |" % (sp["target"], sp["order"], sp["first_spans"],
                                                                   sp["first_rows"], sp["final_spans"],
                                                                   sp["final_rows"]))
    out += ["", "Calibration time: statistics %.0f us per calibration token (%d tokens); " % (
        info["statistics_us_per_token"], info["tokens"]) + ", ".join(
        "%s %.1f s" % (k, v) for k, v in info["seconds"].items()) + "."]
    return out


def moe_section(demo, rows):
    moe = [r for r in rows if r["family"] == "moe"]
    if not moe:
        return []
    info = demo.get("moe", {})
    out = ["", "MoE (MoEfication): each layer's %s neurons in %s experts of %s (%s zero-padded), a linear router per "
               "layer fitted on %s calibration tokens; the chosen experts' outputs summed with weight 1 "
               "(bytes: the chosen experts' matrices, padded rows included, and the router):" % (
                   info.get("d_ff", "?"), info.get("experts", "?"), info.get("d_ff_expert", "?"),
                   info.get("padded_neurons", "?"), info.get("calibration_tokens", "?")), "",
           "| policy | experts / token | bytes | KL | top-1 | ppl | best uniform FFN row at <= bytes |",
           "|---|---|---|---|---|---|---|"]
    uniform = [r for r in rows if r["family"] in UNIFORM_FFN]
    for r in moe:
        uni = best(uniform, r["bytes_fraction"])
        out.append("| %s | %.3f | %.3f | %.4g | %.3f | %.3f | %s |" % (
            r["policy"], r.get("experts_per_token", float("nan")), r["bytes_fraction"], r["kl"], r["top1"], r["ppl"],
            "%.5f (%s, %.3f)" % (uni["kl"], uni["policy"], uni["bytes_fraction"]) if uni else "-"))
    quality = info.get("router_quality")
    if quality:
        ks = sorted(quality, key=int)
        out += ["", "Router quality (evaluation tokens x layers: true contribution mass of the router's top k / "
                    "of the true top k; 1 is a perfect router):", "",
                "| k | " + " | ".join(ks) + " |", "|---|" + "---|" * len(ks),
                "| quality | " + " | ".join("%.4f" % quality[k] for k in ks) + " |"]
    return out


def kv_section(demo, rows):
    kv = [r for r in rows if r["family"] == "kv"]
    if not kv:
        return []
    out = ["", "KV cache in tiered stores (%s sequences continued to %s tokens, the FFN dense; memory: bytes held "
               "after the sequence / an f32 cache's):" % (demo.get("sequences"), demo.get("kv_length")), "",
           "| policy | memory | KL | top-1 | ppl |", "|---|---|---|---|---|"]
    for r in sorted(kv, key=lambda r: -r["memory_fraction"]):
        out.append("| %s | %.4f | %.3g | %.3f | %.3f |" % (r["policy"], r["memory_fraction"], r["kl"], r["top1"],
                                                          r["ppl"]))
    return out


def quantized_section(rows):
    quant = [r for r in rows if r["family"] == "quantized"]
    if not quant:
        return []
    f32 = {r["policy"]: r for r in rows if r["family"] != "quantized"}
    out = ["", "Quantized FFN weights (W_gate, W_up, W_down^T by ggml's reference quantizers; attention and classifier "
               "f32): KL and top-1 against the f32 dense model, and against the dense model of the same dtype "
               "(bytes: of that model's FFN bytes); the last column is the same policy on the f32 model:", "",
           "| policy | kept | bytes | KL vs f32 dense | top-1 vs f32 dense | KL vs quantized dense | "
           "top-1 vs quantized dense | ppl | KL of the f32 row |", "|---|---|---|---|---|---|---|---|---|"]
    for r in quant:
        base = f32.get(r.get("base_policy"))
        out.append("| %s | %.3f | %.3f | %.5f | %.3f | %.5f | %.3f | %.3f | %s |" % (
            r["policy"], r["kept_fraction"], r["bytes_fraction"], r["kl"], r["top1"], r["kl_vs_quant_dense"],
            r["top1_vs_quant_dense"], r["ppl"], "%.5f" % base["kl"] if base else "-"))
    return out


def relu_section(rows):
    relu = [r for r in rows if r["family"] == "relu"]
    if not relu:
        return []
    other = {r["policy"]: r for r in rows if r["family"] not in ("relu", "quantized")}
    out = ["", "ReLU-fied model (data/stories260K_relu.bin): KL and top-1 against the original (SwiGLU) dense model "
               "and against the ReLU model's own dense model; the last two columns are the SwiGLU model's row of the "
               "same policy (against its dense model):", "",
           "| policy | kept | bytes | KL vs original | top-1 vs original | KL vs ReLU dense | top-1 vs ReLU dense | "
           "ppl | SwiGLU kept / bytes | SwiGLU KL |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in relu:
        base = other.get(r["policy"][len("relu "):])
        out.append("| %s | %.3f | %.3f | %.5f | %.3f | %.5f | %.3f | %.3f | %s | %s |" % (
            r["policy"], r["kept_fraction"], r["bytes_fraction"], r["kl"], r["top1"], r["kl_vs_relu_dense"],
            r["top1_vs_relu_dense"], r["ppl"], "%.3f / %.3f" % (base["kept_fraction"], base["bytes_fraction"])
            if base else "-", "%.5f" % base["kl"] if base else "-"))
        if r.get("scorer") == "relu_exact" and r.get("kept_per_layer"):
            out.append("| (neurons active per layer) | %s | | | | | | | | |" %
                       " / ".join("%.3f" % v for v in r["kept_per_layer"]))
    return out


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
        if r["family"] in ("dense", "token_sparse", "calibrated", "moe", "kv", "quantized", "relu"):
            continue
        families.setdefault("%s (%s)" % (r["scorer"], r["family"]), []).append((r["kept_fraction"], r["kl"]))
    out += ["| scorer (selector) | kept where KL > 0.01 | kept where KL > 0.05 | bytes read at KL 0.05 |",
            "|---|---|---|---|"]
    by_bytes = {}
    for r in rows:
        if r["family"] in ("moe", "kv", "quantized", "relu"):
            continue
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
    out += calibrated_sections(demo, rows)
    out += moe_section(demo, rows)
    out += kv_section(demo, rows)
    out += quantized_section(rows)
    out += relu_section(rows)
    out += ["", "Every row (a KV row runs the FFN dense: kept and bytes 1):", "",
            "| policy | kept | bytes | KL | top-1 | ppl |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append("| %s | %.3f | %.3f | %.5f | %.3f | %.3f |" % (r["policy"], r["kept_fraction"], r["bytes_fraction"],
                                                                  r["kl"], r["top1"], r["ppl"]))
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
