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
import json
import os
import struct
import sys

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 128, 2, 4, 2, 32, 256, 512
SEED_CHANNEL, SEED_TENSOR = 3, 4
MASK = (1 << 64) - 1


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


def dense_tensor(m):
    w = [f16_bits(m.dequant(r, c)) for r in range(m.rows) for c in range(m.cols)]
    return {m.name + ".weight": ("F16", [m.rows, m.cols], struct.pack("<%dH" % len(w), *w))}


def shared_tensors(seed, lm_head):
    """Embedding, norms and (untied) lm_head: fp16 values, the same in every format."""
    t = {}

    def matrix(name, tag):
        # k / 2048 with |k| <= 128: 8 significant bits, exact in fp16 and in bf16
        v = [f16_bits(((rand(seed, tag, i) & 255) - 128) / 2048.0) for i in range(VOCAB * HIDDEN)]
        t[name] = ("F16", [VOCAB, HIDDEN], struct.pack("<%dH" % len(v), *v))

    matrix("model.embed_tokens.weight", "embed")
    if lm_head:
        matrix("lm_head.weight", "lm_head")

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


def config(quantization_config, tied):
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
        "tie_word_embeddings": tied,
        "torch_dtype": "float16",
    }
    if quantization_config:
        c["quantization_config"] = quantization_config
    return c


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


def save(out, name, cfg, tensors):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)


def model(seed, per_tensor):
    return [Linear(seed, "model.layers.%d.%s" % (l, mod), rows, cols, per_tensor)
            for l in range(LAYERS) for (mod, rows, cols) in LINEARS]


def use_micro_shape():
    global HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, LINEARS
    HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB = 16, 1, 2, 1, 8, 32, 32
    LINEARS = linears()


def write_model(out, linears, shared, tied, dense_name, formats):
    dense = dict(shared)
    for m in linears:
        dense.update(dense_tensor(m))
    save(out, dense_name, config(None, tied), dense)
    for name, qc, pack in formats:
        t = dict(shared)
        for m in linears:
            t.update(pack(m))
        save(out, name, config(qc, tied), t)


def main():
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__.strip())
        return
    micro = "--micro" in args
    args = [a for a in args if a != "--micro"]
    unknown = [a for a in args if a.startswith("-")]
    if unknown or len(args) > 1:
        sys.exit(f"make_fp8_checkpoints.py: usage: [--micro] [OUT]; not understood: {' '.join(unknown or args[1:])}")
    out = args[0] if args else os.path.join("tests", "data", "fp8")
    if micro:
        use_micro_shape()
    column = lambda m: [m.rows, 1]
    write_model(out, model(SEED_CHANNEL, False), shared_tensors(SEED_CHANNEL, True), False, "dequant", [
        ("fp8-channel", {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": None,
                         "modules_to_not_convert": ["lm_head"]},
         lambda m: fp8_tensors(m, "weight_scale_inv", "F32", column, False)),
        ("ct-channel", ct_config(), lambda m: fp8_tensors(m, "weight_scale", "F16", column, False)),
    ])
    write_model(out, model(SEED_TENSOR, True), shared_tensors(SEED_TENSOR, False), True, "dequant-tensor", [
        ("fp8-tensor", {"quant_method": "fp8", "activation_scheme": "static"},
         lambda m: fp8_tensors(m, "weight_scale_inv", "BF16", lambda m: [], True)),
    ])


if __name__ == "__main__":
    main()
