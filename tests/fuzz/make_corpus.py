#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_llama2c (tests/fuzz/corpus/). The first byte of each input
selects the loader: 0 checkpoint, 1 tokenizer with vocab 512, 2 tokenizer with the vocab size
in the next 4 bytes (little-endian uint32). Run from anywhere; rewrites the folder."""
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
os.makedirs(out, exist_ok=True)
for name in os.listdir(out):
    os.remove(os.path.join(out, name))
for name, b in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(b)
print("wrote %d seeds, %d bytes, to %s" % (len(seeds), sum(map(len, seeds.values())), out))
