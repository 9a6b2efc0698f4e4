#!/usr/bin/env python3
"""Small FP8 (E4M3) checkpoints as Hugging Face tools publish them, for decodebench's tests.

Pure Python 3 (no numpy, no torch): the safetensors files are written by hand. Every model
has the tiny Llama shape of configs/tiny.json (hidden 128, 2 layers, 4 heads, 2 kv heads,
head_dim 32, intermediate 256, vocab 512), and its weights are known integers drawn from a
seed:

  r               = R(name + ".q", row * cols + col)
  code[row][col]  = (r % 0x68) | 0x80 * ((r >> 32) & 1)       (E4M3, |value| <= 60, never NaN)
  scale[row]      = (8 + (R(name + ".s", row) & 7)) * 2^-14   (per channel)
  scale           = (8 + (R(name + ".s", 0) & 7)) * 2^-14     (per tensor)

where R(tag, i) is the splitmix64 finalizer of fnv1a64(tag) + seed + (i + 1) * 0x9E3779B97F4A7C15
(mod 2^64) and `name` the linear's HF module name (model.layers.0.self_attn.q_proj);
tests/test_fp8_checkpoint.cpp draws the same integers. An E4M3 value is an integer of at most
4 bits times a power of two (2^-9 the smallest), a scale one of 4 bits times 2^-14, so every
dequantized weight code * scale is an integer of at most 8 bits times 2^-23 or more, below
0.06: exact in fp16 (and in float). The dequantized checkpoints hold exactly the weights the
FP8 files describe.

Written under OUT (default tests/data/fp8):
  fp8-channel/     quant_method fp8 (dynamic activations, weight_block_size null), weight_scale_inv
                   F32 [out, 1]; lm_head F16 (modules_to_not_convert ["lm_head"])
  ct-channel/      compressed-tensors float-quantized, strategy channel, weight_scale F16 [out, 1];
                   lm_head F16 (ignore ["lm_head"]); the same weights as fp8-channel
  fp8-tensor/      quant_method fp8, static activations (an input_scale F32 [] a linear), one
                   weight_scale_inv BF16 [] a tensor; tied embeddings
  dequant/         fp8-channel's and ct-channel's weights, dequantized, F16
  dequant-tensor/  fp8-tensor's weights, dequantized, F16
each with config.json (LlamaForCausalLM, with the quantization_config for the FP8 ones) and
model.safetensors. Run: python3 scripts/make_fp8_checkpoints.py [--micro] [OUT]

--micro: the same files for the fuzz targets' micro shape (tests/fuzz/micro.json: hidden 16,
1 layer, 2 heads, 1 kv head, head_dim 8, intermediate 32, vocab 32), a few KB each
(scripts/fuzz_corpus.sh seeds fuzz_int4_checkpoint, which reads any quantized checkpoint,
with them).
"""
import os
import struct

from checkpoint_writer import f16_bits, f16_value, parse_args, rand, write_model

SEED_CHANNEL, SEED_TENSOR = 3, 4


def bf16_bits(x):
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    assert bits & 0xFFFF == 0, x  # exact in bf16
    return bits >> 16


def e4m3_value(code):
    """The value of an E4M3 code (1 sign, 4 exponent bits with bias 7, 3 mantissa bits)."""
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 15, code & 7
    assert not (e == 15 and m == 7), code  # NaN
    return sign * (m * 2.0 ** -9 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))


class Linear:
    """Known integers of one linear: codes [rows][cols], scales (one a row, or one)."""

    def __init__(self, seed, name, rows, cols, per_tensor):
        self.name, self.rows, self.cols = name, rows, cols
        self.code = []
        for r in range(rows):
            row = []
            for c in range(cols):
                x = rand(seed, name + ".q", r * cols + c)
                row.append((x % 0x68) | (0x80 if (x >> 32) & 1 else 0))
            self.code.append(row)
        n = 1 if per_tensor else rows
        self.scale = [(8 + (rand(seed, name + ".s", i) & 7)) * 2.0 ** -14 for i in range(n)]

    def row_scale(self, r):
        return self.scale[0] if len(self.scale) == 1 else self.scale[r]

    def dequant(self, r, c):
        w = e4m3_value(self.code[r][c]) * self.row_scale(r)
        assert f16_value(f16_bits(w)) == w  # exact in fp16
        return w


def codes(m):
    return bytes(q for row in m.code for q in row)


def fp8_tensors(m, scale_name, scale_dtype, scale_shape, input_scale):
    pack = {"F32": lambda v: struct.pack("<f", v), "BF16": lambda v: struct.pack("<H", bf16_bits(v)),
            "F16": lambda v: struct.pack("<H", f16_bits(v))}[scale_dtype]
    t = {
        m.name + ".weight": ("F8_E4M3", [m.rows, m.cols], codes(m)),
        m.name + "." + scale_name: (scale_dtype, scale_shape(m), b"".join(pack(s) for s in m.scale)),
    }
    if input_scale:  # static activations: read past by decodebench (weight-only)
        t[m.name + ".input_scale"] = ("F32", [], struct.pack("<f", 0.0625))
    return t


def shared_tensors(shape, seed, lm_head):
    """Embedding, norms and (untied) lm_head: fp16 values, the same in every format."""
    t = shape.norms(seed)

    def matrix(name, tag):
        # k / 2048 with |k| <= 128: 8 significant bits, exact in fp16 and in bf16
        v = [f16_bits(((rand(seed, tag, i) & 255) - 128) / 2048.0) for i in range(shape.vocab * shape.hidden)]
        t[name] = ("F16", [shape.vocab, shape.hidden], struct.pack("<%dH" % len(v), *v))

    matrix("model.embed_tokens.weight", "embed")
    if lm_head:
        matrix("lm_head.weight", "lm_head")
    return t


# compressed-tensors as llm-compressor writes an FP8_DYNAMIC model (RedHatAI's
# Meta-Llama-3.1-8B-Instruct-FP8-dynamic): every Linear but the lm_head, channel scales.
def ct_config():
    args = {"actorder": None, "block_structure": None, "group_size": None, "num_bits": 8,
            "observer_kwargs": {}, "symmetric": True, "type": "float"}
    return {
        "config_groups": {"group_0": {
            "input_activations": dict(args, dynamic=True, observer=None, strategy="token"),
            "output_activations": None,
            "targets": ["Linear"],
            "weights": dict(args, dynamic=False, observer="minmax", strategy="channel"),
        }},
        "format": "float-quantized",
        "global_compression_ratio": None,
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "quant_method": "compressed-tensors",
        "quantization_status": "compressed",
    }


def main():
    shape, out = parse_args("make_fp8_checkpoints.py", __doc__, os.path.join("tests", "data", "fp8"))

    def model(seed, per_tensor):
        return shape.model(lambda name, rows, cols: Linear(seed, name, rows, cols, per_tensor))

    column = lambda m: [m.rows, 1]
    write_model(out, shape, model(SEED_CHANNEL, False), shared_tensors(shape, SEED_CHANNEL, True), False, "dequant", [
        ("fp8-channel", {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": None,
                         "modules_to_not_convert": ["lm_head"]},
         lambda m: fp8_tensors(m, "weight_scale_inv", "F32", column, False)),
        ("ct-channel", ct_config(), lambda m: fp8_tensors(m, "weight_scale", "F16", column, False)),
    ])
    write_model(out, shape, model(SEED_TENSOR, True), shared_tensors(shape, SEED_TENSOR, False), True,
                "dequant-tensor", [
                    ("fp8-tensor", {"quant_method": "fp8", "activation_scheme": "static"},
                     lambda m: fp8_tensors(m, "weight_scale_inv", "BF16", lambda m: [], True)),
                ])


if __name__ == "__main__":
    main()
