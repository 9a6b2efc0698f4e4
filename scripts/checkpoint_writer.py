"""What scripts/make_int4_checkpoints.py and scripts/make_fp8_checkpoints.py share.

Pure Python 3 (no numpy, no torch): the seeded integer generator the tests draw the same
integers from, fp16 bits, the tiny and micro Llama shapes, and the writers of a checkpoint's
config.json and model.safetensors.
"""
import json
import os
import struct
import sys

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
    """R(tag, i): the splitmix64 finalizer of fnv1a64(tag) + seed + (i + 1) * golden (mod 2^64)."""
    return mix((fnv1a64(tag) + seed + (i + 1) * 0x9E3779B97F4A7C15) & MASK)


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def f16_value(bits):
    return struct.unpack("<e", struct.pack("<H", bits))[0]


class Shape:
    """A Llama shape: configs/tiny.json's (TINY) or the fuzz targets' tests/fuzz/micro.json (MICRO)."""

    def __init__(self, hidden, layers, heads, kv_heads, head_dim, inter, vocab):
        self.hidden, self.layers, self.heads, self.kv_heads = hidden, layers, heads, kv_heads
        self.head_dim, self.inter, self.vocab = head_dim, inter, vocab

    def linears(self):
        """(module, rows = out, cols = in) of each block linear."""
        return [
            ("self_attn.q_proj", self.heads * self.head_dim, self.hidden),
            ("self_attn.k_proj", self.kv_heads * self.head_dim, self.hidden),
            ("self_attn.v_proj", self.kv_heads * self.head_dim, self.hidden),
            ("self_attn.o_proj", self.hidden, self.heads * self.head_dim),
            ("mlp.gate_proj", self.inter, self.hidden),
            ("mlp.up_proj", self.inter, self.hidden),
            ("mlp.down_proj", self.hidden, self.inter),
        ]

    def model(self, make):
        """make(name, rows, cols) of every block linear, layer by layer."""
        return [make("model.layers.%d.%s" % (l, mod), rows, cols)
                for l in range(self.layers) for (mod, rows, cols) in self.linears()]

    def norms(self, seed):
        """The RMSNorm weights: fp16 values in [0.9, 1.1]."""
        t = {}
        for name in (["model.layers.%d.%s.weight" % (l, n) for l in range(self.layers)
                      for n in ("input_layernorm", "post_attention_layernorm")] + ["model.norm.weight"]):
            v = [f16_bits(0.9 + (rand(seed, name, i) & 1023) / 1024.0 * 0.2) for i in range(self.hidden)]
            t[name] = ("F16", [self.hidden], struct.pack("<%dH" % self.hidden, *v))
        return t

    def config(self, quantization_config, tied):
        c = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_act": "silu",
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.inter,
            "vocab_size": self.vocab,
            "max_position_embeddings": 256,
            "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0,
            "tie_word_embeddings": tied,
            "torch_dtype": "float16",
        }
        if quantization_config:
            c["quantization_config"] = quantization_config
        return c


TINY = Shape(128, 2, 4, 2, 32, 256, 512)
MICRO = Shape(16, 1, 2, 1, 8, 32, 32)


def dense_tensor(m):
    """A linear's dequantized weights (m.dequant(r, c), exact in fp16) as an F16 tensor."""
    w = [f16_bits(m.dequant(r, c)) for r in range(m.rows) for c in range(m.cols)]
    return {m.name + ".weight": ("F16", [m.rows, m.cols], struct.pack("<%dH" % len(w), *w))}


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


def save(out, name, cfg, tensors):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)


def write_model(out, shape, linears, shared, tied, dense_name, formats):
    """The dequantized F16 checkpoint `dense_name`, then each (name, quantization_config,
    pack(linear) -> tensors) of `formats`, all with the `shared` (unquantized) tensors."""
    dense = dict(shared)
    for m in linears:
        dense.update(dense_tensor(m))
    save(out, dense_name, shape.config(None, tied), dense)
    for name, qc, pack in formats:
        t = dict(shared)
        for m in linears:
            t.update(pack(m))
        save(out, name, shape.config(qc, tied), t)


def parse_args(script, doc, default_out):
    """[--micro] [OUT] from the command line: (the shape, OUT); --help prints `doc` and exits."""
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(doc.strip())
        sys.exit(0)
    micro = "--micro" in args
    args = [a for a in args if a != "--micro"]
    unknown = [a for a in args if a.startswith("-")]
    if unknown or len(args) > 1:
        sys.exit(f"{script}: usage: [--micro] [OUT]; not understood: {' '.join(unknown or args[1:])}")
    return (MICRO if micro else TINY), (args[0] if args else default_out)
