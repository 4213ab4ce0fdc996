#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_llama2c (tests/fuzz/corpus/). The first byte of each input
selects the loader: 0 checkpoint, 1 tokenizer with vocab 512, 2 tokenizer with the vocab size
in the next 4 bytes (little-endian uint32), 3 a per-layer table, 4 a calibration file (JSON).
Run from anywhere; rewrites the folder."""
import json
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
data = os.path.join(here, "..", "..", "data")
out = os.path.join(here, "corpus")


def checkpoint(dim, hidden, layers, heads, kv_heads, vocab, seq):
    kv_dim = dim * kv_heads // heads
    v = abs(vocab)
    n = v * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hidden * dim) + dim
    n += seq * (dim // heads) + (v * dim if vocab < 0 else 0)
    head = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq)
    return head + struct.pack("<%df" % n, *[((i * 37) % 17 - 8) / 8.0 for i in range(n)])


def tokenizer(max_len, tokens):
    b = struct.pack("<i", max_len)
    for text, score in tokens:
        raw = text.encode("latin-1")
        b += struct.pack("<fi", score, len(raw)) + raw
    return b


tiny_vocab = [("<unk>", 0), ("\n<s>\n", 0), ("\n</s>\n", 0), ("<0x41>", 0), (" ", 0), ("a", 0), ("b", 0),
              ("ab", 1), (" ab", 2), ("\xc3\xa9", 0)]
tiny = checkpoint(8, 16, 1, 2, 1, 16, 4)
with open(os.path.join(data, "stories260K.bin"), "rb") as f:
    real_header = f.read(28)
with open(os.path.join(data, "tok512.bin"), "rb") as f:
    tok512 = f.read()

seeds = {
    "ckpt_dim8": b"\0" + tiny,
    "ckpt_dim8_unshared": b"\0" + checkpoint(8, 16, 2, 4, 2, -16, 4),
    "ckpt_dim8_truncated": b"\0" + tiny[:-5],
    "ckpt_header_only": b"\0" + real_header,
    "tok512": b"\1" + tok512,
    "tok512_prefix": b"\1" + tok512[:600],
    "tok_tiny": b"\2" + struct.pack("<I", len(tiny_vocab)) + tokenizer(6, tiny_vocab),
    "tok_tiny_trailing": b"\2" + struct.pack("<I", len(tiny_vocab) - 1) + tokenizer(6, tiny_vocab),
}


def calibration(layers=2, d_model=4, d_ff=8):
    """A small valid calibration file: every kind of layer data and budget."""
    def layer(l):
        return {
            "score_weights": [0.5 + 0.1 * j for j in range(d_ff)],
            "down_norms": [1.0 + 0.05 * j for j in range(d_ff)],
            "permutation": list(range(d_ff))[::-1] if l == 0 else [],
            "tiers": [{"m": 1, "base": []}, {"m": 2, "base": [1, 5]}, {"m": 4, "base": [5]}],
            "tier_predictor": {"hidden": 2, "tiers": 3, "mean": [0.0] * 8, "scale": [1.0] * 8,
                               "w1": [0.1 * ((i % 5) - 2) for i in range(16)], "b1": [0.1, -0.1],
                               "w2": [0.5, -0.5, 0.25, 0.75, -1.0, 1.0], "b2": [0.0, 0.1, 0.2],
                               "out_mean": [-13.8, -6.0, -4.0], "out_scale": [1.0, 2.0, 2.0]},
            "gate_predictors": [{"rank": 2, "a": [0.1 * i for i in range(2 * d_model)],
                                 "u": [0.05 * i - 0.3 for i in range(d_ff * 2)]}],
        }

    def setting(rule, keep=1.0, threshold=0.0, tier=0, predict_tier=False, tier_budget=0.0, with_base=False,
                refine=1.0, gate_rank=0):
        return {"dense": False, "rule": rule, "keep": keep, "threshold": threshold, "tier": tier,
                "predict_tier": predict_tier, "tier_budget": tier_budget, "with_base": with_base,
                "refine": refine, "gate_rank": gate_rank, "bytes_fraction": 0.7}

    def budget(name, settings, thresholds=()):
        return {"name": name, "method": name, "target_bytes": 0.75, "bytes_fraction": 0.74, "kl": 0.01,
                "layers": [settings] * layers if settings else [], "input_thresholds": list(thresholds)}

    return json.dumps({
        "format": "actsparse-calibration", "version": 1,
        "model": {"layers": layers, "d_model": d_model, "d_ff": d_ff, "activation": "silu",
                  "weights": "fnv1a64:0123456789abcdef"},
        "sample": {"sequences": 2, "tokens": 64},
        "layers": [layer(l) for l in range(layers)],
        "budgets": [budget("top_k", setting("top_k", keep=0.5)),
                    budget("threshold+base", setting("threshold", keep=0.5, threshold=0.3, tier=1, with_base=True)),
                    budget("refine", setting("top_k", keep=0.75, refine=0.6)),
                    budget("tiers", setting("tier", tier=2, predict_tier=True, tier_budget=0.01)),
                    budget("low-rank", setting("top_k", keep=0.5, gate_rank=2, refine=0.8)),
                    budget("teal", None, ["-inf"] + [0.01 * i for i in range(1, 7 * layers)])],
    }, indent=1).encode()


cal = calibration()
seeds.update({
    "table_float": b"\3# layer value\n0 0.5\n1 -inf\n2 1e-3\n",
    "table_duplicate": b"\3" + b"0 1\n0 2\n",
    "calibration": b"\4" + cal,
    "calibration_truncated": b"\4" + cal[: len(cal) // 3],
    "calibration_newer": b"\4" + cal.replace(b'"version": 1', b'"version": 2'),
})
os.makedirs(out, exist_ok=True)
for name in os.listdir(out):
    os.remove(os.path.join(out, name))
for name, b in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(b)
print("wrote %d seeds, %d bytes, to %s" % (len(seeds), sum(map(len, seeds.values())), out))
