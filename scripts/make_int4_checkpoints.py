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
import os
import struct

from checkpoint_writer import MICRO, f16_bits, f16_value, parse_args, rand, write_model

SEED_SYM, SEED_ASYM = 1, 2
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble k of a word holds output column 8 * word + AWQ_ORDER[k]


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


def shared_tensors(shape, seed):
    """Embedding (tied lm_head) and norms: fp16 values, the same in every format."""
    t = shape.norms(seed)
    emb = [f16_bits(((rand(seed, "embed", i) & 2047) - 1024) / 1024.0 * 0.05)
           for i in range(shape.vocab * shape.hidden)]
    t["model.embed_tokens.weight"] = ("F16", [shape.vocab, shape.hidden], struct.pack("<%dH" % len(emb), *emb))
    return t


def gptq_config(group, sym, fmt):
    return {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": False, "sym": sym,
            "checkpoint_format": fmt, "damp_percent": 0.01, "static_groups": False, "true_sequential": True}


def main():
    shape, out = parse_args("make_int4_checkpoints.py", __doc__, os.path.join("tests", "data", "int4"))
    groups = (16, 8) if shape is MICRO else (64, 32)
    for seed, group, sym in ((SEED_SYM, groups[0], True), (SEED_ASYM, groups[1], False)):
        kind = "sym" if sym else "asym"
        formats = [("gptq-v1-" + kind, gptq_config(group, sym, "gptq"), lambda m: gptq_tensors(m, True))]
        if not sym:
            formats.append(("gptq-v2-asym", gptq_config(group, sym, "gptq_v2"), lambda m: gptq_tensors(m, False)))
            formats.append(("awq", {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
                                    "version": "gemm", "modules_to_not_convert": None}, awq_tensors))
        linears = shape.model(lambda name, rows, cols: Linear(seed, name, rows, cols, group, sym))
        write_model(out, shape, linears, shared_tensors(shape, seed), True, "dequant-" + kind, formats)


if __name__ == "__main__":
    main()
