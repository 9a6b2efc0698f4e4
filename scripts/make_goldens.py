#!/usr/bin/env python3
"""Golden data from an independent implementation (HF transformers), for decodebench's tests.

Builds tiny random models in float32 with fixed seeds, rounds every parameter to a value
that the saved checkpoint's dtype represents exactly (so the checkpoint holds exactly the
weights the float32 reference ran), saves each with save_pretrained, and records:
  - tokens: the prompt followed by 16 greedy tokens
  - logits: float32 logits at every position of that sequence but the last
in golden.safetensors beside the model. The models, each in tests/data/hf/<name>/:
  tiny-llama          Llama: GQA, llama3 rope scaling, untied lm_head; F16 model.safetensors
  tiny-llama-bf16     Llama, the tiny-llama shape but head_dim 24 (q_dim 96, not hidden 128;
                      on the GPU, a head size for the plain attention kernel); BF16
                      model.safetensors, config dtype bfloat16. Its values are representable
                      in both bf16 and fp16 (rounded to fp16, then to bf16), so decodebench,
                      which holds dense weights in fp16, runs exactly them
  tiny-llama-sharded  Llama, the tiny-llama shape but with tied embeddings (no lm_head.weight,
                      so the tests hold a tied and an untied Llama); F16 tensors in
                      model-0000k-of-0000n.safetensors shards (at least 2) that
                      model.safetensors.index.json names, as save_pretrained(max_shard_size=...)
                      writes a large checkpoint
  tiny-qwen2          Qwen2: q/k/v biases, tied embeddings; F16 model.safetensors
  tiny-qwen3          Qwen3: q/k norm, head_dim independent of hidden, tied embeddings; F16
                      model.safetensors

The seed of each model is the first whose greedy steps all have a top-1/top-2 logit gap of
at least 1% of the largest logit (and whose tokens do not just repeat), so fp16 kernels
(~1e-3 relative error) must reproduce transformers' tokens exactly: a mismatch is a bug,
not a coin flip.

Then a LoRA golden for the saved tiny-llama (peft): an adapter of rank 4, lora_alpha 8 (scale
2) on all seven linears (q/k/v/o/gate/up/down_proj), A and B random and non-zero (PEFT would
initialize B to zero), rounded to fp16-representable values, saved with save_pretrained in
tiny-llama-lora/ (adapter_config.json + adapter_model.safetensors) with golden.safetensors
beside it: the greedy tokens and float32 logits of base + adapter under transformers + peft.
The adapter's seed is the first with the same decisive-gap rule whose tokens differ from the
base model's.

Run on the GPU machine (transformers, torch and peft are there; the computation itself runs
on the CPU in float32 with eager attention):
    python3 scripts/make_goldens.py tests/data/hf              # everything
    python3 scripts/make_goldens.py tests/data/hf --lora-only  # only the LoRA golden, for the
                                                               # committed tiny-llama
    python3 scripts/make_goldens.py tests/data/hf --only=tiny-qwen2  # one model's golden
    python3 scripts/make_goldens.py tests/data/int4 --int4  # the GPTQ/AWQ files' golden: greedy
                                                            # tokens and logits of transformers
                                                            # on their dequantized weights
    python3 scripts/make_goldens.py tests/data/fp8 --fp8    # the FP8 files' golden, alike
    python3 scripts/make_goldens.py tests/data/hf --only=tiny-llama-bf16 --only=tiny-llama-sharded
--only=NAME (repeatable) writes only the models named, and no LoRA golden.
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

PROMPT = [1, 17, 250, 3, 99, 411, 7, 42]
NEW_TOKENS = 16
MIN_RELATIVE_GAP = 0.01


def llama_config(**overrides):
    kw = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256,
              rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    kw.update(overrides)
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64}
    if int(transformers.__version__.split(".")[0]) >= 5:
        return transformers.LlamaConfig(**kw, rope_parameters={**rope, "rope_theta": 10000.0})
    return transformers.LlamaConfig(**kw, rope_theta=10000.0, rope_scaling=rope)


def qwen3_config():
    kw = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
              rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False)
    if int(transformers.__version__.split(".")[0]) >= 5:
        return transformers.Qwen3Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return transformers.Qwen3Config(**kw, rope_theta=1000000.0)


def qwen2_config():
    kw = dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False)
    if int(transformers.__version__.split(".")[0]) >= 5:
        return transformers.Qwen2Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return transformers.Qwen2Config(**kw, rope_theta=1000000.0)


def representable(p, dtype):
    """p's values rounded to ones that `dtype` holds exactly, and fp16 too (decodebench keeps
    dense weights in fp16). Rounding an fp16 value to bf16 keeps it in fp16: 8 significant bits
    at an exponent fp16 reaches, or a multiple of fp16's smallest subnormal."""
    p = p.half().float()
    return p if dtype == torch.float16 else p.to(dtype).float()


def build(cls, config, seed, linear_std, dtype):
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = cls(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):  # qwen2's q/k/v biases: signed, larger than a weight
                p.copy_(0.5 * torch.randn_like(p))
            elif p.dim() == 1:  # norm weights: near 1
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(linear_std * torch.randn_like(p))
            p.copy_(representable(p, dtype))
    return model


def greedy(model):
    seq = list(PROMPT)
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([seq])).logits[0, -1]
            seq.append(int(torch.argmax(logits)))
        logits = model(torch.tensor([seq[:-1]])).logits[0].float()
    return seq, logits


def min_relative_gap(logits, first):
    gaps = []
    for row in logits[first:]:
        top = torch.topk(row, 2).values
        gaps.append(float((top[0] - top[1]) / row.abs().max()))
    return min(gaps)


def check_saved(d, name, dtype, sharded):
    """What the tests rely on: the files save_pretrained wrote are the form `name` stands for."""
    from safetensors import safe_open
    index = os.path.join(d, "model.safetensors.index.json")
    if sharded:
        if not os.path.exists(index):
            sys.exit(f"{name}: save_pretrained wrote no model.safetensors.index.json")
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        if len(files) < 2:
            sys.exit(f"{name}: {len(files)} shard, expected at least 2 (lower its max_shard_size)")
    else:
        if os.path.exists(index):
            sys.exit(f"{name}: save_pretrained sharded the checkpoint, expected one model.safetensors")
        files = ["model.safetensors"]
    for file in files:
        with safe_open(os.path.join(d, file), framework="pt") as f:
            for key in f.keys():
                if f.get_tensor(key).dtype != dtype:
                    sys.exit(f"{name}: {file} holds {key} in {f.get_tensor(key).dtype}, expected {dtype}")
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    saved, want = config.get("dtype", config.get("torch_dtype")), str(dtype).split(".")[1]
    if saved != want:
        sys.exit(f"{name}: config.json says dtype {saved}, expected {want}")


def make(out_dir, name, cls, config_fn, linear_std, dtype=torch.float16, max_shard_size=None):
    for seed in range(1000):
        model = build(cls, config_fn(), seed, linear_std, dtype)
        seq, logits = greedy(model)
        gap = min_relative_gap(logits, len(PROMPT) - 1)
        if gap >= MIN_RELATIVE_GAP and len(set(seq[len(PROMPT):])) > NEW_TOKENS // 2:
            break
    else:
        sys.exit(f"{name}: no seed gives decisive greedy steps")
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    # An earlier save in another form (one file, or other shards) would be left beside the new one.
    for old in os.listdir(d):
        if old.startswith("model") and (old.endswith(".safetensors") or old.endswith(".index.json")):
            os.remove(os.path.join(d, old))
    shard = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.to(dtype).save_pretrained(d, safe_serialization=True, **shard)
    check_saved(d, name, dtype, sharded=max_shard_size is not None)
    for extra in ("generation_config.json",):
        p = os.path.join(d, extra)
        if os.path.exists(p):
            os.remove(p)
    save_file({"tokens": torch.tensor(seq, dtype=torch.int32), "logits": logits.contiguous()},
              os.path.join(d, "golden.safetensors"),
              metadata={"prompt_length": str(len(PROMPT)), "new_tokens": str(NEW_TOKENS), "seed": str(seed),
                        "min_relative_gap": f"{gap:.4f}", "transformers": transformers.__version__,
                        "torch": torch.__version__,
                        "command": "python3 scripts/make_goldens.py tests/data/hf"})
    print(f"{name}: seed {seed}, tokens {seq[len(PROMPT):]}, min relative top-2 gap {gap:.4f}")


LORA_RANK = 4
LORA_ALPHA = 8
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def load_saved(cls, d):
    """A checkpoint saved by make(), in float32 (its fp16 values exactly) with eager attention."""
    dtype = {"dtype": torch.float32} if int(transformers.__version__.split(".")[0]) >= 5 \
        else {"torch_dtype": torch.float32}
    return cls.from_pretrained(d, attn_implementation="eager", **dtype).float().eval()


def make_lora(out_dir, base_name, cls):
    try:
        import peft
    except ImportError:
        sys.exit("the LoRA golden needs peft (pip install peft)")
    from safetensors.torch import load_file
    base_dir = os.path.join(out_dir, base_name)
    base_tokens = load_file(os.path.join(base_dir, "golden.safetensors"))["tokens"].tolist()
    new = slice(len(PROMPT), None)
    for seed in range(1000):
        config = peft.LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, target_modules=LORA_TARGETS, lora_dropout=0.0,
                                 bias="none", task_type="CAUSAL_LM")
        model = peft.get_peft_model(load_saved(cls, base_dir), config)
        torch.manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                # Spread: delta = 2 * B (A x) comes to about a third of W x (linear_std 0.05).
                if "lora_A" in name:
                    p.copy_(0.1 * torch.randn_like(p))
                elif "lora_B" in name:
                    p.copy_(0.05 * torch.randn_like(p))
                else:
                    continue
                p.copy_(p.half().float())  # exactly representable in fp16, as decodebench stores them
                p[p == 0] = 2.0 ** -10     # non-zero, or the adapter would not be all there
        model.eval()
        seq, logits = greedy(model)
        gap = min_relative_gap(logits, len(PROMPT) - 1)
        if (gap >= MIN_RELATIVE_GAP and len(set(seq[new])) > NEW_TOKENS // 2
                and seq[new] != base_tokens[new]):
            break
    else:
        sys.exit(f"{base_name}-lora: no seed gives decisive greedy steps that differ from the base model")
    d = os.path.join(out_dir, base_name + "-lora")
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("README.md",):  # the model card peft writes
        p = os.path.join(d, extra)
        if os.path.exists(p):
            os.remove(p)
    save_file({"tokens": torch.tensor(seq, dtype=torch.int32), "logits": logits.contiguous()},
              os.path.join(d, "golden.safetensors"),
              metadata={"prompt_length": str(len(PROMPT)), "new_tokens": str(NEW_TOKENS), "seed": str(seed),
                        "base_model": base_name, "r": str(LORA_RANK), "lora_alpha": str(LORA_ALPHA),
                        "min_relative_gap": f"{gap:.4f}", "transformers": transformers.__version__,
                        "torch": torch.__version__, "peft": peft.__version__,
                        "command": " ".join(["python3", "scripts/make_goldens.py"] + sys.argv[1:])})
    print(f"{base_name}-lora: seed {seed}, tokens {seq[new]}, min relative top-2 gap {gap:.4f}")


def make_dequant(folder, names):
    """transformers on the dequantized weights of quantized test checkpoints: the GPTQ and AWQ
    files' (scripts/make_int4_checkpoints.py writes dequant-sym/ and dequant-asym/ beside them)
    or the FP8 files' (scripts/make_fp8_checkpoints.py writes dequant/ and dequant-tensor/):
    the golden the quantized files must decode to. The weights are fixed by those scripts, so
    there is no seed to choose; the smallest top-2 gap is recorded in the metadata."""
    for name in names:
        d = os.path.join(folder, name)
        seq, logits = greedy(load_saved(transformers.LlamaForCausalLM, d))
        gap = min_relative_gap(logits, len(PROMPT) - 1)
        save_file({"tokens": torch.tensor(seq, dtype=torch.int32), "logits": logits.contiguous()},
                  os.path.join(d, "golden.safetensors"),
                  metadata={"prompt_length": str(len(PROMPT)), "new_tokens": str(NEW_TOKENS),
                            "min_relative_gap": f"{gap:.4f}", "transformers": transformers.__version__,
                            "torch": torch.__version__,
                            "command": " ".join(["python3", "scripts/make_goldens.py"] + sys.argv[1:])})
        print(f"{name}: tokens {seq[len(PROMPT):]}, min relative top-2 gap {gap:.4f}")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    lora_only = "--lora-only" in sys.argv[1:]
    if "--int4" in sys.argv[1:]:
        torch.set_num_threads(4)
        return make_dequant(args[0] if args else "tests/data/int4", ("dequant-sym", "dequant-asym"))
    if "--fp8" in sys.argv[1:]:
        torch.set_num_threads(4)
        return make_dequant(args[0] if args else "tests/data/fp8", ("dequant", "dequant-tensor"))
    only = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
    out = args[0] if args else "tests/data/hf"
    torch.set_num_threads(4)
    # Tied embeddings (tiny-llama-sharded, qwen2, qwen3): with small layers the residual stays
    # close to the input token's embedding and greedy decoding repeats it; larger layers make
    # the tokens move.
    llama = transformers.LlamaForCausalLM
    # (name, class, config, linear_std, how it is saved)
    models = [("tiny-llama", llama, llama_config, 0.05, {}),
              ("tiny-llama-bf16", llama, lambda: llama_config(head_dim=24), 0.05, {"dtype": torch.bfloat16}),
              # ~720 KB of fp16 tensors in shards of at most 300 KB: three or more
              ("tiny-llama-sharded", llama, lambda: llama_config(tie_word_embeddings=True), 0.15,
               {"max_shard_size": "300KB"}),
              ("tiny-qwen2", transformers.Qwen2ForCausalLM, qwen2_config, 0.15, {}),
              ("tiny-qwen3", transformers.Qwen3ForCausalLM, qwen3_config, 0.15, {})]
    unknown = sorted(set(only) - {m[0] for m in models})
    if unknown:
        sys.exit(f"--only: no model named {', '.join(unknown)} (known: {', '.join(m[0] for m in models)})")
    if not lora_only:
        for name, cls, config_fn, linear_std, save in models:
            if not only or name in only:
                make(out, name, cls, config_fn, linear_std, **save)
    # On the checkpoint as saved (and committed): the adapter golden must fit those weights.
    if not only:
        make_lora(out, "tiny-llama", transformers.LlamaForCausalLM)


if __name__ == "__main__":
    main()
