#!/usr/bin/env python3
"""ReLU-fies the llama2.c stories260K model by distillation (issue 24, part 1: the model).

    /usr/bin/python3 scripts/relufy.py [--steps N] [--minutes M] [--out data/stories260K_relu.bin]

Reads the SwiGLU teacher (data/stories260K.bin), trains a student of the same architecture
and initial weights whose FFN gate is relu instead of silu,
    FFN(x) = w2 (relu(w1 x) * (w3 x))       (teacher: silu(w1 x)),
and writes it as a llama2.c checkpoint of the same layout (data/stories260K_relu.bin; the
RoPE tables are copied through) with a JSON report next to it. numpy only, one thread; the
forward pass reproduces examples/llama2c/model.hpp (RMSNorm eps 1e-5, RoPE on pairs (i, i+1),
grouped-query attention, shared classifier): greedy decoding from BOS gives the tokens
tests/unit/test_llama2c_model.cpp documents. The C++ model hard-codes silu: running the
student needs activation::relu there (part 2 of the issue).

Data. --sequences sequences of --length tokens sampled from the teacher from BOS at
temperature 1 (PCG64, --seed), and its next-token distribution at every position (stored in
float16); a held-out set from --eval-seed. No outside text.

Method (what and why):
  - Loss: mean KL(teacher || student) over every position, plus a sparsity penalty. Adam
    (beta2 0.99), linear warmup then cosine decay, global gradient norm clipped at 1. The
    backward pass is written by hand (scripts/test_relufy.py checks it against finite
    differences).
  - The gate moves from silu to relu gradually, (1 - a) silu + a relu with a rising from 0
    to 1 over the first --relu-ramp of the steps: swapping relu in at once costs 3.6
    nats/token (the teacher leans on silu's negative lobe); the ramp lets the rest of the
    network follow.
  - Sparsity penalty: the L1 norm of the gate's relu output measured in units of its row,
    relu(g_j) / ||w1_j * rms_ffn||, as in ProSparse but normalized: a plain L1 on relu(g)
    can be lowered without a single extra zero by shrinking w1 and growing w3 (or rms_ffn
    and w2), the same function; the normalized one is invariant to those rescalings, so
    only turning neurons off lowers it. (--cap bounds each term, a surrogate of the count
    of active neurons; not used by the reference run.)
  - The penalty's weight lambda is set by a controller, not a fixed schedule: once the gate
    is relu, a target zero share rises linearly from the share then (about 54%) to --target
    over --ramp of the steps and holds; every step lambda *= exp(gain * (target - share)).
    The run thus ends at the target share whatever the exchange rate between KL and zeros,
    and the remaining steps recover KL at that share as lambda relaxes.
  - No shifted relu: relu(x - b) needs a per-neuron bias, which the llama2.c format has no
    place for (the FFN has no bias and its input is RMS-normalized, so no input is
    constant); the student is a plain llama2.c file that any llama2.c runner reads with the
    gate's activation switched to relu.

Results (held-out: 64 sequences x 256 tokens; KL in nats/token against the teacher, whose
perplexity on its own samples is 3.57; zeros: exact zeros of relu(w1 x) over all layers):
    run                                                    steps    zeros   KL     top-1   ppl
    relu swapped in, no training                               0    50.4%   3.56   16.6%  126.5
    relu, no penalty                                         150    51.5%   0.043  90.9%   3.73
    penalty, fast controller (gain 3, lambda up to 10) *     150    85.3%   0.242  78.6%   4.55
    penalty, gain 1, target 0.85                             150    86.2%   0.330  74.7%   4.97
      the same, each term capped at 1 (--cap 1)              150    86.4%   0.305  75.6%   4.87
    penalty, gain 1, lambda at most 2 *                      150    74.6%   0.142  83.5%   4.11
    each FFN alone fitted to the teacher's (MSE, penalty)  600/layer 82.6%  0.566  64.1%   6.38
      then end to end, target 0.82                           300    82.7%   0.112  85.6%   4.01
    target 0.83, gain 0.5                                    600    83.5%   0.107  85.9%   3.98
    target 0.82, gain 0.5                                    500    82.6%   0.110  85.8%   3.99
    target 0.81 (the defaults otherwise)                     500    81.6%   0.103  85.9%   3.97
    the reference run (the defaults: target 0.81)            850    81.1%   0.085  87.1%   3.89
  (* 512 training sequences, the others 2048; the exploration runs shuffled with another
  stream than this script.) The issue's goal, KL <= 0.05 at >= 80% zeros, is not reached in
  the budget: relu alone still costs 0.04 after 150 steps, and at 81-84% zeros the runs of
  500-600 steps end at 0.10-0.11 and the 850-step reference at 0.085; KL falls with the steps
  (0.103 -> 0.085 from 500 to 850), and 850 steps is what the 20-minute budget holds.

Reproducibility: the same seed and arguments write the same bytes (one BLAS thread, fixed
orders of summation, the number of steps fixed by --steps). --minutes is only a safety
stop: if the budget runs out first, training stops early with a warning, the JSON says
"reference": false, and the result is not the reference one.

Speed: Debian's numpy links the reference BLAS; the projections run through np.einsum
(2-3x faster here) and attention skips the causal mask's upper blocks. A step of 16 x 256
tokens takes 1.1-1.3 s on the 2-core build machine; the reference run takes 17.5 minutes
(19 with a build on the other core).
"""

import os

# One BLAS thread, set before numpy loads its BLAS: a threaded BLAS splits sums differently
# from run to run, and the output must be the same bytes for the same seed and arguments.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

BOS = 1  # llama2.c's beginning-of-sequence token
RMS_EPS = 1e-5  # examples/llama2c/model.hpp: x / sqrt(mean(x^2) + 1e-5) * weight
ROPE_BASE = 10000.0


# ----------------------------------------------------------------------------------------------
# Checkpoint format (llama2.c "version 0", examples/llama2c/checkpoint.hpp)


@dataclasses.dataclass(frozen=True)
class Config:
    dim: int
    hidden_dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    vocab_size: int  # always positive here; `shared` says whether the classifier is the embedding
    seq_len: int
    shared: bool = True

    @property
    def head_size(self):
        return self.dim // self.n_heads

    @property
    def kv_dim(self):
        return self.dim * self.n_kv_heads // self.n_heads

    def header(self):
        """The 7 int32 of the file (a negative vocab_size: an unshared classifier)."""
        vocab = self.vocab_size if self.shared else -self.vocab_size
        return np.array(
            [self.dim, self.hidden_dim, self.n_layers, self.n_heads, self.n_kv_heads, vocab, self.seq_len], "<i4"
        )


# The trained tensors in file order, and their shapes ([out x in] row-major per layer, y = W x).
PARAMS = ("emb", "rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3", "rms_final")


def param_shapes(cfg):
    L, D, H, KV = cfg.n_layers, cfg.dim, cfg.hidden_dim, cfg.kv_dim
    return {
        "emb": (cfg.vocab_size, D),
        "rms_att": (L, D),
        "wq": (L, D, D),
        "wk": (L, KV, D),
        "wv": (L, KV, D),
        "wo": (L, D, D),
        "rms_ffn": (L, D),
        "w1": (L, H, D),  # gate
        "w2": (L, D, H),  # down
        "w3": (L, H, D),  # up
        "rms_final": (D,),
    }


def file_layout(cfg):
    """(name, shape) of every float32 array of the file, in order: the parameters, the two
    RoPE tables llama2.c still writes (freq_cis_real, freq_cis_imag: the C++ reader skips and
    recomputes them; they are copied through unchanged), then wcls when not shared."""
    layout = [(n, s) for n, s in param_shapes(cfg).items()]
    half = cfg.head_size // 2
    layout += [("freq_cis_real", (cfg.seq_len, half)), ("freq_cis_imag", (cfg.seq_len, half))]
    if not cfg.shared:
        layout.append(("wcls", (cfg.vocab_size, cfg.dim)))
    return layout


def parse_checkpoint(data):
    """(config, arrays) of a checkpoint's bytes; arrays holds every float32 array by name
    (the parameters, freq_cis_real/imag and, if unshared, wcls), as float32 copies."""
    if len(data) < 28:
        raise ValueError(f"{len(data)} bytes: shorter than the 28-byte header")
    h = np.frombuffer(data, "<i4", 7)
    cfg = Config(int(h[0]), int(h[1]), int(h[2]), int(h[3]), int(h[4]), abs(int(h[5])), int(h[6]), int(h[5]) > 0)
    layout = file_layout(cfg)
    floats = sum(int(np.prod(s)) for _, s in layout)
    if len(data) != 28 + 4 * floats:
        raise ValueError(f"{len(data)} bytes, but the header {h.tolist()} asks for {28 + 4 * floats}")
    arrays, at = {}, 28
    for name, shape in layout:
        n = int(np.prod(shape))
        arrays[name] = np.frombuffer(data, "<f4", n, at).reshape(shape).astype(np.float32)
        at += 4 * n
    return cfg, arrays


def read_checkpoint(path):
    with open(path, "rb") as f:
        return parse_checkpoint(f.read())


def checkpoint_bytes(cfg, arrays):
    """The file's bytes: the header, then every array of file_layout() as little-endian float32."""
    parts = [cfg.header().tobytes()]
    for name, shape in file_layout(cfg):
        a = np.asarray(arrays[name])
        if a.shape != shape:
            raise ValueError(f"{name}: shape {a.shape}, the header asks for {shape}")
        parts.append(np.ascontiguousarray(a, "<f4").tobytes())
    return b"".join(parts)


def write_checkpoint(path, cfg, arrays):
    data = checkpoint_bytes(cfg, arrays)
    with open(path, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------
# Forward pass (examples/llama2c/model.hpp), batched over whole sequences, and its backward pass


# Products of the projections. numpy's einsum (its own SIMD loops) runs these shapes 2-3x
# faster than the reference BLAS Debian's numpy links, and is as deterministic; the batched
# attention products stay on matmul (BLAS), faster there.
def lin(x, w):
    """x @ w.T: rows x [n x in] through w [out x in]."""
    return np.einsum("ni,oi->no", x, w)


def lin_back(dy, w):
    """dy @ w: the gradient reaching lin()'s input."""
    return np.einsum("no,oi->ni", dy, w)


def lin_grad(dy, x):
    """dy.T @ x: the gradient of lin()'s weight, summed over the rows."""
    return np.einsum("no,ni->oi", dy, x)


def rope_tables(cfg, T, dtype):
    """cos and sin [T x head_size/2] of RoPE: pair (i, i+1) of a head turns by
    pos * 10000^(-i/head_size) (i even), computed in float32 as the C++ model does."""
    hs = cfg.head_size
    i = np.arange(0, hs, 2, dtype=np.float32)
    freq = np.float32(1.0) / np.power(np.float32(ROPE_BASE), i / np.float32(hs))
    angle = np.arange(T, dtype=np.float32)[:, None] * freq[None, :]
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def rope(x, cos, sin):
    """x [..., T, heads, head_size] turned pair by pair; cos/sin [T, head_size/2]."""
    c, s = cos[:, None, :], sin[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def rope_backward(d, cos, sin):
    """The gradient through rope(): the transposed rotation (the same turn backwards)."""
    return rope(d, cos, -sin)


def rmsnorm(x, w):
    """(x / sqrt(mean(x^2) + eps) * w, (normalized x, 1/rms)) over the last axis."""
    inv = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(RMS_EPS))
    xh = x * inv
    return xh * w, (xh, inv)


def rmsnorm_backward(dout, w, saved):
    """(dx, dw) of rmsnorm(); dw summed over every row."""
    xh, inv = saved
    dw = np.sum((dout * xh).reshape(-1, xh.shape[-1]), axis=0)
    dxh = dout * w
    dx = inv * (dxh - xh * np.mean(dxh * xh, axis=-1, keepdims=True))
    return dx, dw


# The FFN gate's activation is given by alpha, the weight of relu in a mix with silu:
# 0 is the teacher's silu, 1 the student's relu; between, (1 - alpha) silu + alpha relu, which
# training moves through to turn the teacher into the student gradually.
SILU, RELU = 0.0, 1.0


def activate(g, alpha):
    if alpha == RELU:
        return np.maximum(g, 0)
    silu = g / (1 + np.exp(-g))
    if alpha == SILU:
        return silu
    return g.dtype.type(1 - alpha) * silu + g.dtype.type(alpha) * np.maximum(g, 0)


def activate_backward(da, g, alpha):
    if alpha == RELU:
        return da * (g > 0)
    s = 1 / (1 + np.exp(-g))
    d = s * (1 + g * (1 - s))
    if alpha != SILU:
        d = g.dtype.type(1 - alpha) * d + g.dtype.type(alpha) * (g > 0)
    return da * d


def log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


def gate_norms(P, l):
    """n_j = ||w1_j * rms_ffn||: the length of gate neuron j's row acting on the normalized
    input; g_j / n_j is the pre-activation measured in units that no rescaling can shrink."""
    e = P["w1"][l] * P["rms_ffn"][l][None, :]
    return np.sqrt(np.sum(e * e, axis=1))


ATTENTION_BLOCK = 64  # query positions per block of the causal attention


def attention(q, k, v, scale):
    """Causal grouped-query attention of q [B, T, NH, hs] over k, v [B, T, NKV, hs]: the
    output [B*T, NH*hs] (head h reads kv head h // (NH / NKV)), and what attention_backward()
    needs. Queries are laid out per kv head, position-major: qh [B, NKV, T*G, hs] with row
    t*G + g for query head kv*G + g, so that one batched product per kv head scores all of its
    query heads, and a block of positions is a block of rows. Block by block (ATTENTION_BLOCK
    positions), a block's queries score only the keys up to its last position: the causal
    mask's zero upper blocks are never computed.

    Speed (numpy's einsum runs an inner product over contiguous last axes several times faster
    than the reference BLAS; BLAS is faster where the summed axis is the head's 8 values):
    scores by matmul, the products summed over positions by einsum on transposed copies."""
    B, T, NH, hs = q.shape
    NKV = k.shape[2]
    G = NH // NKV
    # The queries carry the 1/sqrt(hs) scale (fewer products than the scores).
    qh = (q * scale).reshape(B, T, NKV, G, hs).transpose(0, 2, 1, 3, 4).reshape(B, NKV, T * G, hs)
    kh = np.ascontiguousarray(k.transpose(0, 2, 1, 3))  # [B, NKV, T, hs]
    vt = np.ascontiguousarray(v.transpose(0, 2, 3, 1))  # [B, NKV, hs, T]
    mask = np.triu(np.full((ATTENTION_BLOCK, ATTENTION_BLOCK), -np.inf, q.dtype), 1)[:, None, :]  # t sees s <= t
    oh = np.empty_like(qh)
    probs = []
    for t0 in range(0, T, ATTENTION_BLOCK):
        t1 = min(T, t0 + ATTENTION_BLOCK)
        n, rows = t1 - t0, slice(t0 * G, t1 * G)
        s = (qh[:, :, rows] @ kh[:, :, :t1].transpose(0, 1, 3, 2)).reshape(B, NKV, n, G, t1)
        s[..., t0:] += mask[:n, :, :n]  # only the diagonal block has masked keys
        s -= s.max(axis=-1, keepdims=True)
        a = np.exp(s, out=s)
        a /= a.sum(axis=-1, keepdims=True)
        a = a.reshape(B, NKV, n * G, t1)
        oh[:, :, rows] = np.einsum("bkmt,bkht->bkmh", a, vt[..., :t1])
        probs.append(a)
    o = oh.reshape(B, NKV, T, G, hs).transpose(0, 2, 1, 3, 4).reshape(B * T, NH * hs)
    return o, (qh, kh, vt, probs, scale)


def attention_backward(do, saved):
    """(dq [B, T, NH, hs], dk, dv [B, T, NKV, hs]) of attention() given do [B*T, NH*hs]."""
    qh, kh, vt, probs, scale = saved
    B, NKV, T, hs = kh.shape
    G = qh.shape[2] // T
    dot = np.ascontiguousarray(do.reshape(B, T, NKV, G, hs).transpose(0, 2, 4, 1, 3)).reshape(B, NKV, hs, T * G)
    qt = np.ascontiguousarray(qh.transpose(0, 1, 3, 2))  # [B, NKV, hs, T*G]
    kt = np.ascontiguousarray(kh.transpose(0, 1, 3, 2))  # [B, NKV, hs, T]
    dqh = np.empty_like(qh)
    dkh = np.zeros_like(kh)
    dvh = np.zeros_like(kh)
    for i, t0 in enumerate(range(0, T, ATTENTION_BLOCK)):
        t1 = min(T, t0 + ATTENTION_BLOCK)
        a, rows = probs[i], slice(t0 * G, t1 * G)
        at = np.ascontiguousarray(a.transpose(0, 1, 3, 2))  # [B, NKV, t1, rows]
        dvh[:, :, :t1] += np.einsum("bktm,bkhm->bkth", at, dot[..., rows])  # summed over the group's heads
        da = dot[..., rows].transpose(0, 1, 3, 2) @ vt[..., :t1]
        ds = a * (da - np.sum(da * a, axis=-1, keepdims=True))  # softmax backward (qh holds the scale)
        dqh[:, :, rows] = np.einsum("bkmt,bkht->bkmh", ds, kt[..., :t1])
        dst = np.ascontiguousarray(ds.transpose(0, 1, 3, 2))
        dkh[:, :, :t1] += np.einsum("bktm,bkhm->bkth", dst, qt[..., rows])
    dq = (dqh * scale).reshape(B, NKV, T, G, hs).transpose(0, 2, 1, 3, 4).reshape(B, T, NKV * G, hs)
    return dq, dkh.transpose(0, 2, 1, 3), dvh.transpose(0, 2, 1, 3)


def forward(cfg, P, tokens, alpha, keep=False):
    """Logits [B*T x vocab] of whole sequences tokens [B x T] from position 0, and the gate
    pre-activations g of every layer (list of [B*T x hidden]); alpha: the gate's activation
    (activate()). keep=True also returns what loss_and_grads() needs for the backward pass."""
    B, T = tokens.shape
    N, D, NH, NKV, hs = B * T, cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_size
    dt = P["emb"].dtype
    cos, sin = rope_tables(cfg, T, dt)
    scale = dt.type(1.0 / math.sqrt(hs))
    x = P["emb"][tokens].reshape(N, D)
    layers, gates = [], []
    for l in range(cfg.n_layers):
        xn, n1 = rmsnorm(x, P["rms_att"][l])
        q = rope(lin(xn, P["wq"][l]).reshape(B, T, NH, hs), cos, sin)
        k = rope(lin(xn, P["wk"][l]).reshape(B, T, NKV, hs), cos, sin)
        v = lin(xn, P["wv"][l]).reshape(B, T, NKV, hs)
        o, att = attention(q, k, v, scale)
        x = x + lin(o, P["wo"][l])
        # FFN: w2 (act(w1 x) * (w3 x)).
        xf, n2 = rmsnorm(x, P["rms_ffn"][l])
        g = lin(xf, P["w1"][l])
        u = lin(xf, P["w3"][l])
        h = activate(g, alpha) * u
        x = x + lin(h, P["w2"][l])
        gates.append(g)
        if keep:
            layers.append((xn, n1, att, o, xf, n2, g, u, h))
    xo, n3 = rmsnorm(x, P["rms_final"])
    logits = lin(xo, P["emb"])  # shared classifier
    if keep:
        return logits, gates, (cos, sin, layers, xo, n3)
    return logits, gates


def loss_and_grads(cfg, P, tokens, p_teacher, negent, alpha, lam, cap=math.inf):
    """Distillation loss of the student on tokens [B x T] and its gradient for every parameter.

    loss = KL + lam * S, where KL = mean over positions of KL(teacher || student) (p_teacher
    [B*T x vocab] the teacher's next-token probabilities, negent [B*T] their sum p log p) and
    S = mean over positions, layers and neurons of min(relu(g_j) / n_j, cap) (gate_norms()):
    an L1 penalty on the normalized gate, capped (a surrogate of the count of active neurons
    that leaves activations above the cap alone)
    Returns (loss, kl, zero share of the gate pre-activations (g <= 0), grads)."""
    B, T = tokens.shape
    N, D, NKV, hs, L, H = B * T, cfg.dim, cfg.n_kv_heads, cfg.head_size, cfg.n_layers, cfg.hidden_dim
    logits, gates, (cos, sin, layers, xo, n3) = forward(cfg, P, tokens, alpha, keep=True)
    logq = log_softmax(logits)
    kl = float(np.mean(negent.astype(np.float64) - np.sum(p_teacher * logq, axis=1, dtype=np.float64)))
    c = lam / (N * L * H)  # the weight of one relu(g)/n term of the penalty
    norms = [gate_norms(P, l) for l in range(L)]
    penalty = sum(
        float(np.sum(np.minimum(np.maximum(g, 0) / norms[l], cap), dtype=np.float64)) for l, g in enumerate(gates)
    )
    zero_share = sum(int(np.count_nonzero(g <= 0)) for g in gates) / (N * L * H)

    grads = {n: np.zeros_like(P[n]) for n in PARAMS}
    dlogits = (np.exp(logq) - p_teacher) / logits.dtype.type(N)
    grads["emb"] += lin_grad(dlogits, xo)
    dx, grads["rms_final"] = rmsnorm_backward(lin_back(dlogits, P["emb"]), P["rms_final"], n3)
    for l in reversed(range(L)):
        xn, n1, att, o, xf, n2, g, u, h = layers[l]
        # FFN
        grads["w2"][l] = lin_grad(dx, h)
        dh = lin_back(dx, P["w2"][l])
        du = dh * activate(g, alpha)
        dg = activate_backward(dh * u, g, alpha)
        # The penalty: d/dg of relu(g)/n where 0 < g/n < cap, and d/dn through
        # n_j = ||w1_j * r|| (r = rms_ffn).
        pushed = (g > 0) & (g < g.dtype.type(cap) * norms[l])
        dg += dg.dtype.type(c) * pushed / norms[l]
        dn = -c * np.sum(g * pushed, axis=0) / (norms[l] * norms[l])  # [hidden]
        r = P["rms_ffn"][l]
        coef = (dn / norms[l])[:, None] * P["w1"][l]  # dn_j/dw1_jk = w1_jk r_k^2 / n_j
        grads["w1"][l] = lin_grad(dg, xf) + coef * (r * r)[None, :]
        grads["w3"][l] = lin_grad(du, xf)
        dxf = lin_back(dg, P["w1"][l]) + lin_back(du, P["w3"][l])
        ddx, dr = rmsnorm_backward(dxf, r, n2)
        grads["rms_ffn"][l] = dr + np.sum(coef * P["w1"][l], axis=0) * r  # dn_j/dr_k = w1_jk^2 r_k / n_j
        dx = dx + ddx
        # Attention
        grads["wo"][l] = lin_grad(dx, o)
        dq, dk, dv = attention_backward(lin_back(dx, P["wo"][l]), att)
        dq = rope_backward(dq, cos, sin).reshape(N, D)
        dk = rope_backward(dk, cos, sin).reshape(N, NKV * hs)
        dv = dv.reshape(N, NKV * hs)
        grads["wq"][l] = lin_grad(dq, xn)
        grads["wk"][l] = lin_grad(dk, xn)
        grads["wv"][l] = lin_grad(dv, xn)
        dxn = lin_back(dq, P["wq"][l]) + lin_back(dk, P["wk"][l]) + lin_back(dv, P["wv"][l])
        ddx, grads["rms_att"][l] = rmsnorm_backward(dxn, P["rms_att"][l], n1)
        dx = dx + ddx
    np.add.at(grads["emb"], tokens.reshape(-1), dx)  # embedding rows, in token order
    return kl + c * penalty, kl, zero_share, grads


# ----------------------------------------------------------------------------------------------
# Sampling the teacher (batch decode with a KV cache) and evaluation


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sample(cfg, P, n, T, rng, alpha=SILU, temperature=1.0, progress=None):
    """n sequences of T tokens from BOS, decoded together (one position at a time, a KV
    cache per layer), each next token drawn from softmax(logits / temperature) by inverse CDF
    with one rng.random() per sequence and position. Returns (tokens [n x T] int32,
    probs [n x T x vocab] in the model's dtype): probs[i, t] is the model's next-token
    distribution after tokens[i, :t+1] at temperature 1 (the distillation target)."""
    L, D, NH, NKV, hs, V = cfg.n_layers, cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_size, cfg.vocab_size
    G = NH // NKV
    dt = P["emb"].dtype
    cos, sin = rope_tables(cfg, T, dt)
    scale = dt.type(1.0 / math.sqrt(hs))
    tokens = np.empty((n, T), np.int32)
    tokens[:, 0] = BOS
    probs = np.empty((n, T, V), dt)
    kc = np.zeros((L, n, NKV, T, hs), dt)
    vc = np.zeros((L, n, NKV, T, hs), dt)
    for t in range(T):
        x = P["emb"][tokens[:, t]]
        c, s = cos[t : t + 1], sin[t : t + 1]
        for l in range(L):
            xn, _ = rmsnorm(x, P["rms_att"][l])
            q = rope(lin(xn, P["wq"][l]).reshape(n, 1, NH, hs), c, s).reshape(n, NKV, G, hs)
            kc[l, :, :, t] = rope(lin(xn, P["wk"][l]).reshape(n, 1, NKV, hs), c, s).reshape(n, NKV, hs)
            vc[l, :, :, t] = lin(xn, P["wv"][l]).reshape(n, NKV, hs)
            a = softmax((q @ kc[l, :, :, : t + 1].transpose(0, 1, 3, 2)) * scale)  # [n, NKV, G, t+1]
            o = (a @ vc[l, :, :, : t + 1]).reshape(n, D)  # heads in order kv head * G + g
            x = x + lin(o, P["wo"][l])
            xf, _ = rmsnorm(x, P["rms_ffn"][l])
            x = x + lin(activate(lin(xf, P["w1"][l]), alpha) * lin(xf, P["w3"][l]), P["w2"][l])
        xo, _ = rmsnorm(x, P["rms_final"])
        logits = lin(xo, P["emb"])
        probs[:, t] = softmax(logits)
        if t + 1 < T:
            p = probs[:, t] if temperature == 1.0 else softmax(logits / dt.type(temperature))
            cdf = np.cumsum(p, axis=1, dtype=np.float64)
            u = rng.random(n) * cdf[:, -1]
            tokens[:, t + 1] = np.minimum(np.sum(cdf <= u[:, None], axis=1), V - 1)
        if progress:
            progress(t + 1)
    return tokens, probs


def sample_set(cfg, P, n, T, seed, temperature=1.0, chunk=256, dtype=np.float32, label=None, t0=None):
    """sample() of n sequences from the PCG64 stream of `seed`, chunk sequences at a time
    (the draws depend on chunk), the distributions stored as dtype (float16 halves the
    training set's memory: 2048 x 256 x 512 distributions are 0.5 GB)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    chunks = [(i, min(n, i + chunk)) for i in range(0, n, chunk)]
    bar = Progress(label, len(chunks) * T, t0 if t0 is not None else time.monotonic()) if label else None
    tokens = np.empty((n, T), np.int32)
    probs = np.empty((n, T, cfg.vocab_size), dtype)
    for c, (i, j) in enumerate(chunks):
        show = (lambda t, c=c: bar(c * T + t)) if bar else None
        tokens[i:j], probs[i:j] = sample(cfg, P, j - i, T, rng, SILU, temperature, show)
    return tokens, probs


def neg_entropy(probs):
    """sum p log p of every distribution [..., vocab] (0 log 0 = 0), float32; in float64 a
    sequence at a time (the whole training set in float64 would be gigabytes)."""
    out = np.empty(probs.shape[:-1], np.float32)
    for i in range(probs.shape[0]):
        p = probs[i].astype(np.float64)
        out[i] = np.sum(p * np.log(np.where(p > 0, p, 1)), axis=-1)
    return out


def evaluate(cfg, P, alpha, tokens, probs, batch=16):
    """Held-out figures of a model against the teacher's distributions probs [n x T x vocab]
    on tokens [n x T] (the teacher's samples): mean KL(teacher || model) per position, top-1
    agreement, perplexity of model and teacher on the sampled next tokens (positions 0..T-2),
    and the share of gate pre-activations <= 0 (the exact zeros of relu) per layer."""
    n, T = tokens.shape
    kl = top1 = nll = nll_t = 0.0
    zeros = np.zeros(cfg.n_layers, np.int64)
    for i in range(0, n, batch):
        tok = tokens[i : i + batch]
        p = probs[i : i + batch].reshape(-1, cfg.vocab_size)
        logits, gates = forward(cfg, P, tok, alpha)
        logq = log_softmax(logits)
        kl += float(np.sum(neg_entropy(p), dtype=np.float64) - np.sum(p * logq, dtype=np.float64))
        top1 += int(np.count_nonzero(np.argmax(logits, axis=1) == np.argmax(p, axis=1)))
        rows = np.arange(tok.shape[0] * T).reshape(-1, T)[:, :-1].reshape(-1)
        nxt = tok[:, 1:].reshape(-1)
        nll -= float(np.sum(logq[rows, nxt], dtype=np.float64))
        nll_t -= float(np.sum(np.log(p[rows, nxt].astype(np.float64))))
        for l, g in enumerate(gates):
            zeros[l] += int(np.count_nonzero(g <= 0))
    positions, predicted = n * T, n * (T - 1)
    per_layer = (zeros / (positions * cfg.hidden_dim)).tolist()
    return {
        "kl": kl / positions,
        "top1": top1 / positions,
        "ppl": math.exp(nll / predicted),
        "ppl_teacher": math.exp(nll_t / predicted),
        "zeros": float(np.mean(per_layer)),
        "zeros_per_layer": per_layer,
    }


# ----------------------------------------------------------------------------------------------
# Training


@dataclasses.dataclass
class Hyper:
    """Training hyper-parameters (the defaults are the reference run's)."""

    steps: int = 0  # set in main(): the --steps default
    batch: int = 16  # sequences per step
    lr: float = 2e-3  # Adam's peak learning rate
    lr_min: float = 1e-4  # the cosine ends here
    warmup: int = 20  # linear warmup steps
    beta1: float = 0.9
    beta2: float = 0.99
    adam_eps: float = 1e-8
    clip: float = 1.0  # global gradient norm
    relu_ramp: float = 0.1  # the gate moves from silu to relu (alpha 0 -> 1) over this part of the steps
    target: float = 0.81  # zero share the penalty's controller holds once ramped
    ramp: float = 0.4  # the target rises linearly from the share at the swap over this part of the steps
    lam0: float = 0.1  # the penalty's weight when it starts (the gate then relu)
    gain: float = 0.5  # controller: lam *= exp(gain * (target - zeros)) per step
    lam_max: float = 5.0
    cap: float = math.inf  # the penalty's cap (loss_and_grads()); inf: plain L1

    def lr_at(self, step):
        """Linear warmup, then cosine from lr to lr_min at the last step."""
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        t = (step - self.warmup) / max(1, self.steps - self.warmup)
        return self.lr_min + 0.5 * (self.lr - self.lr_min) * (1 + math.cos(math.pi * min(t, 1.0)))

    def alpha_at(self, step):
        """The gate's relu weight (activate()): 1 from the end of the relu ramp on."""
        ramp = int(self.relu_ramp * self.steps)
        return RELU if step >= ramp else (step + 1) / (ramp + 1)

    def sparsify_from(self):
        """The first step of the penalty: the gate is relu from there on."""
        return int(self.relu_ramp * self.steps)

    def target_at(self, step, start):
        """The zero share the controller aims at: from the share at sparsify_from() (start)
        up to target over the ramp's part of the steps, then target."""
        ramp = max(1, int(self.ramp * self.steps))
        return start + (self.target - start) * min(1.0, (step - self.sparsify_from()) / ramp)


def adam_step(P, grads, m, v, step, lr, hp):
    """One Adam update in float32, every tensor after clipping the global gradient norm."""
    norm = math.sqrt(sum(float(np.sum(np.square(grads[n], dtype=np.float64))) for n in PARAMS))
    k = np.float32(min(1.0, hp.clip / (norm + 1e-12)))
    b1, b2 = np.float32(hp.beta1), np.float32(hp.beta2)
    c1 = 1 - hp.beta1 ** (step + 1)
    c2 = 1 - hp.beta2 ** (step + 1)
    for n in PARAMS:
        g = grads[n] * k
        m[n] = b1 * m[n] + (1 - b1) * g
        v[n] = b2 * v[n] + (1 - b2) * g * g
        P[n] -= np.float32(lr / c1) * m[n] / (np.sqrt(v[n] / np.float32(c2)) + np.float32(hp.adam_eps))
    return norm


def train(cfg, P, tokens, probs, negent, hp, rng, deadline=None, report=None):
    """Distils the teacher's distributions probs into P (updated in place) for hp.steps steps
    of hp.batch sequences (shuffled with rng, epoch by epoch), or until time.monotonic()
    passes deadline. Returns the number of steps done. report(step, loss, kl, zeros, lam,
    alpha) is called after every step."""
    n = tokens.shape[0]
    m = {k: np.zeros_like(P[k]) for k in PARAMS}
    v = {k: np.zeros_like(P[k]) for k in PARAMS}
    lam, start, order = 0.0, None, np.empty(0, np.int64)
    V = cfg.vocab_size
    for step in range(hp.steps):
        if deadline is not None and time.monotonic() > deadline:
            return step
        if order.size < hp.batch:
            order = np.concatenate([order, rng.permutation(n)])
        idx, order = np.sort(order[: hp.batch]), order[hp.batch :]
        alpha = hp.alpha_at(step)
        if step == hp.sparsify_from():
            lam = hp.lam0
        loss, kl, zeros, grads = loss_and_grads(
            cfg, P, tokens[idx], probs[idx].reshape(-1, V).astype(np.float32), negent[idx].reshape(-1), alpha, lam, hp.cap
        )
        adam_step(P, grads, m, v, step, hp.lr_at(step), hp)
        if report:
            report(step + 1, loss, kl, zeros, lam, alpha)
        if step == hp.sparsify_from():
            start = zeros
        if start is not None:
            # The penalty's weight follows the zero share: up while short of the (ramped)
            # target, down once past it, so the run ends at the target whatever the exchange
            # rate between KL and sparsity.
            lam = min(hp.lam_max, lam * math.exp(hp.gain * (hp.target_at(step + 1, start) - zeros)))
    return hp.steps


# ----------------------------------------------------------------------------------------------
# Command line


class Progress:
    """A one-line text bar on stderr (redrawn in place on a terminal, a line every 5% otherwise)."""

    def __init__(self, label, total, t0, width=28):
        self.label, self.total, self.t0, self.width = label, total, t0, width
        self.tty = sys.stderr.isatty()
        self.shown = -1

    def __call__(self, done, text=""):
        frac = done / max(1, self.total)
        tick = int(frac * 20)
        if not self.tty and tick == self.shown and done != self.total:
            return
        self.shown = tick
        bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
        el = time.monotonic() - self.t0
        line = f"{self.label} [{bar}] {done}/{self.total} {text} {int(el) // 60}:{int(el) % 60:02d}"
        sys.stderr.write(("\r" + line + "\x1b[K") if self.tty else line + "\n")
        if self.tty and done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def report_lines(name, r):
    layers = " ".join(f"{z:.1%}" for z in r["zeros_per_layer"])
    return (
        f"{name}: KL {r['kl']:.4f} nats/token, top-1 {r['top1']:.1%}, ppl {r['ppl']:.3f} "
        f"(teacher {r['ppl_teacher']:.3f}), zeros {r['zeros']:.1%} (layers {layers})"
    )


def keep_freed_memory():
    """Asks glibc to keep freed arrays in the heap: by default it unmaps every large array when
    freed and the kernel faults its pages in again at the next step's allocation, a quarter of
    the training time here. No effect on the results; skipped where there is no glibc."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: allocate arrays up to 1 GiB in the heap
        libc.mallopt(-1, (1 << 31) - 1)  # M_TRIM_THRESHOLD: never give the heap's top back
    except (OSError, AttributeError):
        pass


HYPER_HELP = {
    "batch": "sequences per step",
    "lr": "Adam's peak learning rate",
    "lr_min": "where the cosine decay ends",
    "warmup": "linear warmup steps",
    "beta1": "Adam's beta1",
    "beta2": "Adam's beta2",
    "adam_eps": "Adam's epsilon",
    "clip": "global gradient norm clip",
    "relu_ramp": "part of the steps over which the gate goes from silu to relu",
    "target": "zero share of the gate the penalty's controller holds",
    "ramp": "part of the steps over which the target rises (after the relu ramp)",
    "lam0": "the penalty's weight when it starts",
    "gain": "controller gain: lambda *= exp(gain * (target - share)) per step",
    "lam_max": "largest penalty weight",
    "cap": "cap of each penalty term (inf: plain normalized L1)",
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teacher", default="data/stories260K.bin", help="llama2.c checkpoint (SwiGLU)")
    ap.add_argument("--out", default="data/stories260K_relu.bin", help="the student's checkpoint")
    ap.add_argument("--seed", type=int, default=1234, help="training samples and shuffling (PCG64)")
    ap.add_argument("--eval-seed", type=int, default=4321, help="held-out samples (PCG64)")
    ap.add_argument("--sequences", type=int, default=DEFAULT_SEQUENCES, help="training sequences")
    ap.add_argument("--eval-sequences", type=int, default=64, help="held-out sequences")
    ap.add_argument("--length", type=int, default=256, help="tokens per sequence, BOS included")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="training steps (the reference run's count)")
    ap.add_argument("--minutes", type=float, default=20.0, help="time budget: a safety stop (then not the reference)")
    hp = Hyper()
    for f in dataclasses.fields(Hyper):
        if f.name != "steps":
            ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default,
                            help=HYPER_HELP[f.name] + " (default %(default)s)")
    a = ap.parse_args(argv)
    for f in dataclasses.fields(Hyper):
        setattr(hp, f.name, getattr(a, f.name))
    if a.length < 2 or a.sequences < hp.batch or a.eval_sequences < 1 or hp.steps < 1:
        ap.error("need --length >= 2, --sequences >= --batch, --eval-sequences >= 1, --steps >= 1")

    keep_freed_memory()
    t0 = time.monotonic()
    deadline = t0 + 60 * a.minutes
    cfg, arrays = read_checkpoint(a.teacher)
    if a.length > cfg.seq_len:
        ap.error(f"--length {a.length} exceeds the model's seq_len {cfg.seq_len}")
    if not cfg.shared:
        sys.exit("relufy: an unshared classifier (wcls) is not handled: its gradient is not written")
    teacher = {n: arrays[n] for n in PARAMS}
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    log(f"teacher {a.teacher}: {cfg}")

    tokens, probs = sample_set(cfg, teacher, a.sequences, a.length, a.seed, a.temperature, dtype=np.float16,
                               label="sampling the training set", t0=t0)
    ev_tokens, ev_probs = sample_set(cfg, teacher, a.eval_sequences, a.length, a.eval_seed, a.temperature,
                                     label="sampling the held-out set", t0=t0)
    negent = neg_entropy(probs)  # of the float16 distributions the training sees
    rng = np.random.Generator(np.random.PCG64([a.seed, 1]))  # shuffling: its own stream

    t_eval = time.monotonic()
    swap = evaluate(cfg, teacher, RELU, ev_tokens, ev_probs)
    t_eval = time.monotonic() - t_eval
    log(report_lines("relu swapped in, before training", swap))

    student = {n: teacher[n].copy() for n in PARAMS}
    bar = Progress("distilling", hp.steps, t0)
    show = lambda s, loss, kl, z, lam, alpha: bar(  # noqa: E731
        s, f"loss {loss:.4f} kl {kl:.4f} zeros {z:.1%} lam {lam:.3g} relu {alpha:.2f}")
    # Stop early enough to evaluate and write within the budget.
    done = train(cfg, student, tokens, probs, negent, hp, rng, deadline - 2 * t_eval - 5, show)
    reference = done == hp.steps
    if not reference:
        log(f"\nWARNING: the time budget stopped training after {done} of {hp.steps} steps: "
            "this is NOT the reference result (a slower or busier machine); rerun with more --minutes")

    final = evaluate(cfg, student, RELU, ev_tokens, ev_probs)
    out = dict(arrays)
    out.update(student)
    sha = write_checkpoint(a.out, cfg, out)
    summary = {
        "teacher": a.teacher,
        "checkpoint": a.out,
        "sha256": sha,
        "activation": "relu",
        "method": "distillation (KL teacher||student at every position); gate silu->relu ramp; "
        "L1 penalty on relu(w1 x) / ||w1_j * rms_ffn|| with a controller holding the target zero share",
        "seed": a.seed,
        "eval_seed": a.eval_seed,
        "sequences": a.sequences,
        "eval_sequences": a.eval_sequences,
        "length": a.length,
        "temperature": a.temperature,
        "steps": done,
        "steps_requested": hp.steps,
        "reference": reference,
        "hyper": {k: (None if v == math.inf else v) for k, v in dataclasses.asdict(hp).items()},  # JSON has no inf
        "before_training": swap,
        **final,
    }
    json_path = os.path.splitext(a.out)[0] + ".json"
    with open(json_path, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    elapsed = time.monotonic() - t0
    print(report_lines("relu student, held-out", final))
    print(f"steps {done}/{hp.steps}{'' if reference else ' (time budget: NOT the reference result)'}, "
          f"wall {elapsed / 60:.1f} min")
    print(f"wrote {a.out} (sha256 {sha}) and {json_path}")
    return 0


# The reference run: 17.5 minutes on the 2-core build machine (sampling 1.5, training 16).
DEFAULT_SEQUENCES = 2048
DEFAULT_STEPS = 850

if __name__ == "__main__":
    sys.exit(main())
