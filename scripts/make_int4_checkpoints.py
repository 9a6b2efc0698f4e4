#!/usr/bin/env python3
"""Small GPTQ and AWQ checkpoints in their published packing, for decodebench's tests.

Pure Python 3 (no numpy, no torch): the safetensors files are written by hand. Every model
has the tiny Llama shape of configs/tiny.json (hidden 128, 2 layers, 4 heads, 2 kv heads,
head_dim 32, intermediate 256, vocab 512) with tied embeddings, and its int4 weights are
known integers drawn from a seed:

  q[row][col]     = R(name + ".q", row * cols + col) & 15
  zero[row][grp]  = R(name + ".z", row * groups + grp) & 15      (8 for the symmetric model)
  scale[row][grp] = (64 + (R(name + ".s", row * groups + grp) & 63)) * 2^-14

where R(tag, i) is the splitmix64 finalizer of fnv1a64(tag) + (i + 1) * 0x9E3779B97F4A7C15
(mod 2^64) and `name` the linear's HF module name (model.layers.0.self_attn.q_proj);
tests/test_int4_checkpoint.cpp draws the same integers. A scale has at most 7 significant
bits and |q - zero| at most 4, so every dequantized weight (q - zero) * scale is exact in
fp16: the dequantized checkpoints hold exactly the weights the int4 files describe.

Written under OUT (default tests/data/int4):
  gptq-v1-sym/   GPTQ, checkpoint_format gptq (zeros stored minus 1), sym, group 64
  gptq-v1-asym/  GPTQ, checkpoint_format gptq, asym, group 32
  gptq-v2-asym/  GPTQ, checkpoint_format gptq_v2 (zeros stored as they are), asym, group 32
  awq/           AWQ GEMM (version gemm, zero_point true), group 32, same integers as *-asym
  dequant-sym/   the symmetric model's weights, dequantized, F16
  dequant-asym/  the asymmetric model's weights, dequantized, F16
each with config.json (LlamaForCausalLM, quantization_config for the int4 ones) and
model.safetensors. Run: python3 scripts/make_int4_checkpoints.py [--micro] [OUT]

--micro: the same files for the fuzz targets' micro shape (tests/fuzz/micro.json: hidden 16,
1 layer, 2 heads, 1 kv head, head_dim 8, intermediate 32, vocab 32), in groups of 16 (sym)
and 8 (asym), a few KB each (scripts/fuzz_corpus.sh seeds fuzz_int4_checkpoint with them).
"""
import json
import os
import struct
import sys

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 128, 2, 4, 2, 32, 256, 512
SEED_SYM, SEED_ASYM = 1, 2
MASK = (1 << 64) - 1
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble k of a word holds output column 8 * word + AWQ_ORDER[k]


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def rand(seed, tag, i):
    return mix((fnv1a64(tag) + seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK)


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def f16_value(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


def linears():  # (module, rows = out, cols = in) at the current shape
    return [
        ("self_attn.q_proj", HEADS * HEAD_DIM, HIDDEN),
        ("self_attn.k_proj", KV_HEADS * HEAD_DIM, HIDDEN),
        ("self_attn.v_proj", KV_HEADS * HEAD_DIM, HIDDEN),
        ("self_attn.o_proj", HIDDEN, HEADS * HEAD_DIM),
        ("mlp.gate_proj", INTER, HIDDEN),
        ("mlp.up_proj", INTER, HIDDEN),
        ("mlp.down_proj", HIDDEN, INTER),
    ]


LINEARS = linears()


class Linear:
    """Known integers of one linear: q [rows][cols], zero and scale bits [rows][groups]."""

    def __init__(self, seed, name, rows, cols, group, sym):
        self.name, self.rows, self.cols, self.group = name, rows, cols, group
        groups = cols // group
        self.q = [[rand(seed, name + ".q", r * cols + c) & 15 for c in range(cols)] for r in range(rows)]
        self.zero = [[8 if sym else rand(seed, name + ".z", r * groups + g) & 15 for g in range(groups)]
                     for r in range(rows)]
        self.scale = [[f16_bits((64 + (rand(seed, name + ".s", r * groups + g) & 63)) * 2.0 ** -14)
                       for g in range(groups)] for r in range(rows)]

    def dequant(self, r, c):
        g = c // self.group
        w = (self.q[r][c] - self.zero[r][g]) * f16_value(self.scale[r][g])
        assert f16_value(f16_bits(w)) == w  # exact in fp16
        return w


def gptq_tensors(m, v1):
    """qweight I32 [in/8, out], qzeros I32 [in/g, out/8], scales F16 [in/g, out], g_idx I32 [in]."""
    groups = m.cols // m.group
    qweight = [sum(m.q[o][i * 8 + j] << (4 * j) for j in range(8)) for i in range(m.cols // 8)
               for o in range(m.rows)]
    stored = (lambda z: (z - 1) & 15) if v1 else (lambda z: z)
    qzeros = [sum(stored(m.zero[w * 8 + k][g]) << (4 * k) for k in range(8)) for g in range(groups)
              for w in range(m.rows // 8)]
    scales = [m.scale[o][g] for g in range(groups) for o in range(m.rows)]
    g_idx = [i // m.group for i in range(m.cols)]
    return {
        m.name + ".qweight": ("I32", [m.cols // 8, m.rows], struct.pack("<%dI" % len(qweight), *qweight)),
        m.name + ".qzeros": ("I32", [groups, m.rows // 8], struct.pack("<%dI" % len(qzeros), *qzeros)),
        m.name + ".scales": ("F16", [groups, m.rows], struct.pack("<%dH" % len(scales), *scales)),
        m.name + ".g_idx": ("I32", [m.cols], struct.pack("<%di" % len(g_idx), *g_idx)),
    }


def awq_tensors(m):
    """qweight I32 [in, out/8], qzeros I32 [in/g, out/8] in AWQ_ORDER, scales F16 [in/g, out]."""
    groups = m.cols // m.group
    qweight = [sum(m.q[8 * w + AWQ_ORDER[k]][i] << (4 * k) for k in range(8)) for i in range(m.cols)
               for w in range(m.rows // 8)]
    qzeros = [sum(m.zero[8 * w + AWQ_ORDER[k]][g] << (4 * k) for k in range(8)) for g in range(groups)
              for w in range(m.rows // 8)]
    scales = [m.scale[o][g] for g in range(groups) for o in range(m.rows)]
    return {
        m.name + ".qweight": ("I32", [m.cols, m.rows // 8], struct.pack("<%dI" % len(qweight), *qweight)),
        m.name + ".qzeros": ("I32", [groups, m.rows // 8], struct.pack("<%dI" % len(qzeros), *qzeros)),
        m.name + ".scales": ("F16", [groups, m.rows], struct.pack("<%dH" % len(scales), *scales)),
    }


def dense_tensor(m):
    w = [f16_bits(m.dequant(r, c)) for r in range(m.rows) for c in range(m.cols)]
    return {m.name + ".weight": ("F16", [m.rows, m.cols], struct.pack("<%dH" % len(w), *w))}


def shared_tensors(seed):
    """Embedding (tied lm_head) and norms: fp16 values, the same in every format."""
    t = {}
    emb = [f16_bits(((rand(seed, "embed", i) & 2047) - 1024) / 1024.0 * 0.05) for i in range(VOCAB * HIDDEN)]
    t["model.embed_tokens.weight"] = ("F16", [VOCAB, HIDDEN], struct.pack("<%dH" % len(emb), *emb))

    def norm(name):
        v = [f16_bits(0.9 + (rand(seed, name, i) & 1023) / 1024.0 * 0.2) for i in range(HIDDEN)]
        t[name] = ("F16", [HIDDEN], struct.pack("<%dH" % HIDDEN, *v))

    for l in range(LAYERS):
        norm("model.layers.%d.input_layernorm.weight" % l)
        norm("model.layers.%d.post_attention_layernorm.weight" % l)
    norm("model.norm.weight")
    return t


def write_safetensors(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def config(quantization_config):
    c = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "intermediate_size": INTER,
        "vocab_size": VOCAB,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
    }
    if quantization_config:
        c["quantization_config"] = quantization_config
    return c


def gptq_config(group, sym, fmt):
    return {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False, "sym": sym,
            "checkpoint_format": fmt, "damp_percent": 0.01, "static_groups": False, "true_sequential": True}


def save(out, name, cfg, tensors):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)


def model(seed, group, sym):
    return [Linear(seed, "model.layers.%d.%s" % (l, mod), rows, cols, group, sym)
            for l in range(LAYERS) for (mod, rows, cols) in LINEARS]


def use_micro_shape():
    global HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, LINEARS
    HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 16, 1, 2, 1, 8, 32, 32
    LINEARS = linears()


def main():
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__.strip())
        return
    micro = "--micro" in args
    args = [a for a in args if a != "--micro"]
    unknown = [a for a in args if a.startswith("-")]
    if unknown or len(args) > 1:
        sys.exit(f"make_int4_checkpoints.py: usage: [--micro] [OUT]; not understood: {' '.join(unknown or args[1:])}")
    out = args[0] if args else os.path.join("tests", "data", "int4")
    groups = (16, 8) if micro else (64, 32)
    if micro:
        use_micro_shape()
    for seed, group, sym in ((SEED_SYM, groups[0], True), (SEED_ASYM, groups[1], False)):
        linears = model(seed, group, sym)
        shared = shared_tensors(seed)
        kind = "sym" if sym else "asym"
        dense = dict(shared)
        for m in linears:
            dense.update(dense_tensor(m))
        save(out, "dequant-" + kind, config(None), dense)
        formats = [("gptq-v1-" + kind, gptq_config(group, sym, "gptq"), lambda m: gptq_tensors(m, True))]
        if not sym:
            formats.append(("gptq-v2-asym", gptq_config(group, sym, "gptq_v2"), lambda m: gptq_tensors(m, False)))
            formats.append(("awq", {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
                                    "version": "gemm", "modules_to_not_convert": None}, awq_tensors))
        for name, qc, pack in formats:
            t = dict(shared)
            for m in linears:
                t.update(pack(m))
            save(out, name, config(qc), t)


if __name__ == "__main__":
    main()
