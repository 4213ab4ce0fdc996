#!/usr/bin/env python3
"""Tests of scripts/relufy.py (python3 + numpy, well under a minute):

- the hand-written backward pass against central finite differences in float64, on a tiny
  random model (dim 8, hidden 16, 2 layers, 2 heads, 1 kv head, vocab 11, seq 5), for every
  parameter tensor, with the SiLU (teacher) and ReLU (student) gates and the sparsity penalty on;
- the batch decode used for sampling gives the prefill's distributions;
- writing then reading a checkpoint gives the same arrays (shared and unshared classifier),
  and the shipped stories260K.bin re-serializes to its own bytes;
- two tiny end-to-end runs with the same seed write identical bytes (another seed: other bytes).

Exits non-zero on a failure."""

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import relufy as R  # noqa: E402  (sets the BLAS thread variables before numpy loads)

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = R.Config(dim=8, hidden_dim=16, n_layers=2, n_heads=2, n_kv_heads=1, vocab_size=11, seq_len=5)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def random_arrays(cfg, rng, dtype=np.float64):
    """Every array of the file layout, random (norm weights around 1, matrices ~ 1/sqrt(in))."""
    out = {}
    for name, shape in R.file_layout(cfg):
        if name.startswith("rms"):
            out[name] = 1 + 0.3 * rng.standard_normal(shape)
        else:
            out[name] = rng.standard_normal(shape) * (0.6 if name in ("emb", "wcls") else 1 / np.sqrt(shape[-1]))
        out[name] = out[name].astype(dtype)
    return out


def gradient_check():
    rng = np.random.default_rng(7)
    B, T, V = 2, TINY.seq_len, TINY.vocab_size
    P = {n: a for n, a in random_arrays(TINY, rng).items() if n in R.PARAMS}
    tokens = rng.integers(0, V, (B, T))
    p = R.softmax(2 * rng.standard_normal((B * T, V)))
    negent = np.sum(p * np.log(p), axis=1)
    lam, h = 0.5, 1e-6
    R.ATTENTION_BLOCK = 2  # several causal blocks in a sequence of 5
    for act, alpha, cap in (("silu", R.SILU, np.inf), ("relu", R.RELU, np.inf), ("mix", 0.3, np.inf), ("capped", R.RELU, 0.4)):
        _, _, _, grads = R.loss_and_grads(TINY, P, tokens, p, negent, alpha, lam, cap)
        for name in R.PARAMS:
            worst = 0.0
            flat = P[name].reshape(-1)
            picks = rng.choice(flat.size, size=min(flat.size, 12), replace=False)
            for i in picks:
                keep = flat[i]
                flat[i] = keep + h
                up = R.loss_and_grads(TINY, P, tokens, p, negent, alpha, lam, cap)[0]
                flat[i] = keep - h
                down = R.loss_and_grads(TINY, P, tokens, p, negent, alpha, lam, cap)[0]
                flat[i] = keep
                numeric = (up - down) / (2 * h)
                analytic = grads[name].reshape(-1)[i]
                worst = max(worst, abs(analytic - numeric) / max(abs(analytic), abs(numeric), 1e-9))
            check(worst < 1e-5, f"gradient {act:6} {name:9} worst relative error {worst:.1e} (< 1e-5)")
    # The ReLU check must actually cross both sides of the kink, and the penalty must matter.
    _, gates = R.forward(TINY, P, tokens, R.RELU)
    share = np.mean(np.concatenate(gates) <= 0)
    check(0.2 < share < 0.8, f"the tiny model's gates are mixed ({share:.0%} <= 0)")
    base = R.loss_and_grads(TINY, P, tokens, p, negent, R.RELU, 0.0)[0]
    pen = R.loss_and_grads(TINY, P, tokens, p, negent, R.RELU, lam)[0]
    check(pen > base + 1e-3, "the penalty adds to the loss")
    blocked = R.forward(TINY, P, tokens, R.RELU)[0]
    R.ATTENTION_BLOCK = 64
    whole = R.forward(TINY, P, tokens, R.RELU)[0]
    check(np.max(np.abs(blocked - whole)) < 1e-12, "block-causal attention equals one block")


def decode_matches_prefill():
    rng = np.random.default_rng(3)
    for dt, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        P = {n: a.astype(dt) for n, a in random_arrays(TINY, rng).items() if n in R.PARAMS}
        for act, alpha in (("silu", R.SILU), ("relu", R.RELU)):
            tokens, probs = R.sample(TINY, P, 3, TINY.seq_len, np.random.Generator(np.random.PCG64(5)), alpha)
            logits, _ = R.forward(TINY, P, tokens, alpha)
            diff = np.max(np.abs(R.softmax(logits).reshape(probs.shape) - probs))
            check(diff < tol and np.all(tokens[:, 0] == R.BOS),
                  f"decode equals prefill ({np.dtype(dt).name}, {act}): {diff:.1e} (< {tol:.0e})")


def round_trip():
    rng = np.random.default_rng(11)
    with tempfile.TemporaryDirectory() as d:
        for shared in (True, False):
            cfg = R.Config(**{**TINY.__dict__, "shared": shared})
            arrays = random_arrays(cfg, rng, np.float32)
            path = os.path.join(d, "tiny.bin")
            R.write_checkpoint(path, cfg, arrays)
            cfg2, back = R.read_checkpoint(path)
            same = cfg2 == cfg and back.keys() == arrays.keys()
            same = same and all(np.array_equal(back[n], arrays[n]) and back[n].dtype == np.float32 for n in arrays)
            again = R.checkpoint_bytes(cfg2, back) == open(path, "rb").read()
            check(same and again, f"checkpoint round trip ({'shared' if shared else 'unshared'} classifier)")
    path = os.path.join(ROOT, "data", "stories260K.bin")
    data = open(path, "rb").read()
    cfg, arrays = R.parse_checkpoint(data)
    check(R.checkpoint_bytes(cfg, arrays) == data, "stories260K.bin re-serializes to its own bytes")
    try:
        R.parse_checkpoint(data[:-4])
        check(False, "a truncated checkpoint is refused")
    except ValueError:
        check(True, "a truncated checkpoint is refused")


def determinism():
    rng = np.random.default_rng(13)
    with tempfile.TemporaryDirectory() as d:
        teacher = os.path.join(d, "teacher.bin")
        R.write_checkpoint(teacher, TINY, random_arrays(TINY, rng, np.float32))
        outs = []
        for i, seed in enumerate((5, 5, 6)):
            out = os.path.join(d, f"student{i}.bin")
            args = ["--teacher", teacher, "--out", out, "--seed", str(seed), "--sequences", "8", "--batch", "4",
                    "--eval-sequences", "4", "--length", "5", "--steps", "6", "--warmup", "2"]
            with open(os.devnull, "w") as null:
                stdout, stderr = sys.stdout, sys.stderr
                sys.stdout = sys.stderr = null
                try:
                    rc = R.main(args)
                finally:
                    sys.stdout, sys.stderr = stdout, stderr
            with open(os.path.join(d, f"student{i}.json")) as f:
                summary = json.load(f)
            del summary["checkpoint"]  # the path, the one difference
            outs.append((rc, open(out, "rb").read(), summary))
        check(all(o[0] == 0 for o in outs), "tiny runs succeed")
        check(outs[0][1] == outs[1][1] and outs[0][2] == outs[1][2], "the same seed writes the same bytes (checkpoint and JSON)")
        check(outs[0][1] != outs[2][1], "another seed writes other bytes")
        cfg, arrays = R.parse_checkpoint(outs[0][1])
        check(cfg == TINY, "the student keeps the teacher's header")


if __name__ == "__main__":
    gradient_check()
    decode_matches_prefill()
    round_trip()
    determinism()
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    sys.exit(1 if failures else 0)
