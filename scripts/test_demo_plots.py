#!/usr/bin/env python3
"""Checks a model demo JSON (every row has the documented keys with sane values; dense is
the reference) and that scripts/demo_plots.py draws its plots from it (matplotlib, PNG and
SVG; run this with a Python that has matplotlib). Usage: JSON."""
import json
import math
import os
import subprocess
import sys
import tempfile

KEYS = ["policy", "kept_fraction", "bytes_fraction", "kl", "top1", "ppl", "tokens_per_s"]


def check_plot(stem, lines):
    """stem.png is a PNG, stem.svg an SVG with at least `lines` series groups."""
    with open(stem + ".png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", stem + ".png is not a PNG"
    with open(stem + ".svg", encoding="utf-8") as f:
        svg = f.read()
    assert svg.startswith("<?xml") and svg.count('id="series_') >= lines, stem + ".svg lacks its lines"


def bench_row(kind, speedup):
    """A median row of bench_cpu_ffn's Google Benchmark JSON (f32, 7b shape, one thread)."""
    name = "cpu_ffn/f32/7b/t1/" + kind
    return {"name": name + "_median", "run_name": name, "run_type": "aggregate", "aggregate_name": "median",
            "repetitions": 3, "real_time": 1.0 / speedup, "time_unit": "ms", "speedup": speedup}


def main(path):
    with open(path, encoding="utf-8") as f:
        demo = json.load(f)
    rows = demo["rows"]
    assert rows, "no rows"
    for r in rows:
        for k in KEYS:
            assert k in r, "row %r lacks %s" % (r.get("policy"), k)
        assert 0.0 < r["kept_fraction"] <= 1.0 + 1e-9, r
        # An MoE row with every expert reads the padded rows and the router too (a few % over dense).
        assert 0.0 < r["bytes_fraction"] <= (1.1 if "moe" in r["policy"] else 1.0) + 1e-9, r
        assert r["kl"] >= -1e-12 and 0.0 <= r["top1"] <= 1.0 and r["ppl"] >= 1.0 and r["tokens_per_s"] > 0, r
    dense = [r for r in rows if r["policy"] == "dense"]
    assert len(dense) == 1 and dense[0]["kl"] == 0 and dense[0]["top1"] == 1, dense
    names = {r["policy"] for r in rows}
    for want in ["magnitude top_k 50%", "weight_aware top_k 50%", "gate weight_aware top_k 50%",
                 "magnitude cumulative_mass 0.90", "CATS 50% sparse", "TEAL 50% sparse", "token-sparse speed"]:
        assert want in names, "missing row " + want
    # Fewer neurons kept, more KL: the 25% rows of each top-k scorer are worse than the 90% ones.
    for s in ["magnitude", "weight_aware", "gate weight_aware"]:
        k90 = [r["kl"] for r in rows if r["policy"] == s + " top_k 90%"][0]
        k25 = [r["kl"] for r in rows if r["policy"] == s + " top_k 25%"][0]
        assert k25 > k90, (s, k90, k25)
    assert "greedy_dense" in demo and "greedy_sparse" in demo
    # Calibrated rows: one per method and byte budget, each reading at most its budget on the
    # calibration sample; the calibration's own measurements are in the JSON too.
    cal = [r for r in rows if "calibrated" in r["policy"]]
    methods = {r["scorer"] for r in cal}
    for want in ["budgets", "budgets+refine", "combined", "tiers", "tiers+predictor", "low-rank r16", "teal"]:
        assert want in methods, "missing calibrated method " + want
    for b in ["0.9", "0.833", "0.75", "0.667"]:
        assert any(r["policy"] == "calibrated budgets @ " + b for r in cal), "missing calibrated budgets @ " + b
    info = demo["calibration"]
    for k in ["tokens", "statistics_us_per_token", "seconds", "predictor", "low_rank", "spans", "budgets"]:
        assert k in info, "calibration lacks " + k
    for b in info["budgets"]:
        assert b["bytes"] <= b["target_bytes"] + 1e-6 or b["method"].startswith("tiers"), b
    for l in info["low_rank"]:
        assert 0.0 <= l["precision"] <= 1.0 and 0.0 <= l["recall"] <= 1.0, l
    # MoE rows (the dense model MoEfied: 8 experts per layer, a fitted router): each has its experts
    # per token; every expert is the dense FFN up to the f32 summation order; fewer experts, more KL.
    moe = [r for r in rows if "moe" in r["policy"]]
    info = demo["moe"]
    assert moe and info["experts"] == 8, info
    for r in moe:
        assert r["family"] == "moe" and 0.0 < r["experts_per_token"] <= info["experts"] + 1e-9, r
        assert abs(r["kept_fraction"] - r["experts_per_token"] / info["experts"]) < 1e-4, r
    every = [r for r in moe if r["policy"] == "moe all %d" % info["experts"]]
    assert len(every) == 1 and every[0]["kl"] < 1e-6 and every[0]["top1"] == 1.0, every
    assert every[0]["experts_per_token"] == info["experts"], every
    for want in ["moe top-1", "moe top-2", "moe adaptive 0.7"]:
        assert any(r["policy"] == want for r in moe), "missing row " + want
    assert any(r["policy"].startswith("moe progressive ") for r in moe), "missing a progressive MoE row"
    top = {r["policy"]: r for r in moe}
    assert top["moe top-1"]["kl"] > top["moe top-6"]["kl"] > every[0]["kl"], top
    quality = info["router_quality"]
    assert sorted(quality, key=int) == ["1", "2", "3", "4", "6"], quality
    assert all(0.0 < v <= 1.0 + 1e-9 for v in quality.values()), quality
    # KV rows (the KV cache in tiered stores): memory held as documented, f16 nearly exact, fewer bits more KL.
    kv = {r["policy"]: r for r in rows if "kv" in r["policy"]}
    for want in ["kv f16", "kv int8", "kv int4", "kv fifo 64 f16 + int4", "kv heavy 64 f16 + int4"]:
        assert want in kv, "missing row " + want
    for r in kv.values():
        assert r["family"] == "kv" and 0.0 < r["memory_fraction"] <= 1.0, r
    assert abs(kv["kv f16"]["memory_fraction"] - 0.5) < 1e-9, kv["kv f16"]
    assert abs(kv["kv int4"]["memory_fraction"] - 18 / 128) < 1e-4, kv["kv int4"]
    assert kv["kv f16"]["kl"] < kv["kv int8"]["kl"] < kv["kv int4"]["kl"], kv
    assert any("drop" in p for p in kv), "missing a row with a drop tier"
    # Quantized rows (the FFN weights in q8_0 / q4_0): each dtype's dense row is its own second
    # reference (KL 0 against itself, > 0 against f32), q4_0 loses more than q8_0, and each
    # policy's row has both KLs.
    quant = {r["policy"]: r for r in rows if r.get("family") == "quantized"}
    for t in ["q8_0", "q4_0"]:
        d = quant.get(t + " dense")
        assert d and d["ffn_dtype"] == t and d["base_policy"] == "dense", d
        assert d["kl_vs_quant_dense"] == 0 and d["top1_vs_quant_dense"] == 1 and d["kl"] > 0, d
        for base in ["magnitude top_k 50%", "CATS 50% sparse", "calibrated budgets+refine @ 0.833"]:
            r = quant.get(t + " + " + base)
            assert r and r["base_policy"] == base and r["kl_vs_quant_dense"] > 0, (t, base, r)
            assert 0.0 <= r["top1_vs_quant_dense"] <= 1.0, r
    assert quant["q8_0 dense"]["kl"] < quant["q4_0 dense"]["kl"], quant
    # ReLU-fied model rows (data/stories260K_relu.bin): KL against the original dense model and
    # against the ReLU model's own; exact gating is lossless against the latter and keeps only the
    # active neurons; every policy of the issue is there, the calibrated ones at their byte targets.
    relu = {r["policy"]: r for r in rows if r.get("family") == "relu"}
    for want in ["relu dense", "relu exact gating", "relu magnitude top_k 25%", "relu weight_aware top_k 10%",
                 "relu magnitude cumulative_mass 0.95", "relu calibrated budgets @ 0.4",
                 "relu calibrated budgets+refine @ 0.5"]:
        assert want in relu, "missing ReLU row " + want
    for r in relu.values():
        assert r["kl_vs_relu_dense"] >= -1e-12 and 0.0 <= r["top1_vs_relu_dense"] <= 1.0, r
    d, e = relu["relu dense"], relu["relu exact gating"]
    assert d["kl"] > 0 and d["kl_vs_relu_dense"] == 0 and d["top1_vs_relu_dense"] == 1, d
    assert e["kl_vs_relu_dense"] < 1e-9 and abs(e["kl"] - d["kl"]) < 1e-6, e
    assert e["kept_fraction"] < 0.3 and e["kept_per_layer"] and all(0 < v < 1 for v in e["kept_per_layer"]), e
    assert abs(e["bytes_fraction"] - (1 + 2 * e["kept_fraction"]) / 3) < 2e-3, e
    for b in ("0.5", "0.4"):
        r = relu["relu calibrated budgets+refine @ " + b]
        assert r["bytes_fraction"] <= float(b) + 0.02, r
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_plots.py")
    with tempfile.TemporaryDirectory() as out:
        # Without benchmark rows: the KL plot only, as PNG and SVG, one group per scorer family.
        subprocess.run([sys.executable, script, path, "--out-dir", out, "--bench", os.path.join(out, "none.json")],
                       check=True, stdout=subprocess.DEVNULL)
        check_plot(os.path.join(out, "kl_vs_kept"), 5)
        check_plot(os.path.join(out, "kl_vs_bytes"), 10)
        check_plot(os.path.join(out, "kl_vs_experts"), 3)
        check_plot(os.path.join(out, "kl_vs_memory"), 3)
        check_plot(os.path.join(out, "relu_side_by_side"), 6)
        assert not os.path.exists(os.path.join(out, "speedup_vs_activity.svg"))
        # With FFN decode rows of a benchmark JSON: the speed-up plot too.
        bench = os.path.join(out, "bench.json")
        with open(bench, "w", encoding="utf-8") as f:
            json.dump({"benchmarks": [bench_row("dense", 1.0)] + [
                bench_row("%s_a%.2f" % (s, a), 3 / (1 + 2 * a) * 0.8) for s in ("random", "clustered")
                for a in (0.1, 0.3, 0.5)]}, f)
        subprocess.run([sys.executable, script, path, "--out-dir", out, "--bench", bench], check=True,
                       stdout=subprocess.DEVNULL)
        check_plot(os.path.join(out, "speedup_vs_activity"), 1)
    summary = subprocess.run([sys.executable, os.path.join(os.path.dirname(script), "quality_summary.py"), path],
                             check=True, capture_output=True, text=True).stdout
    assert "| magnitude (top_k) |" in summary and "Token-sparse prefill" in summary, summary
    assert "Calibrated against uniform at equal bytes" in summary and "Tier predictor" in summary, summary
    assert "MoE (MoEfication)" in summary and "Router quality" in summary, summary
    assert "KV cache in tiered stores" in summary, summary
    assert "Quantized FFN weights" in summary and "| q4_0 dense |" in summary, summary
    assert "ReLU-fied model" in summary and "| relu exact gating |" in summary, summary
    print("demo JSON, plots and quality summary: ok (%d rows)" % len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
