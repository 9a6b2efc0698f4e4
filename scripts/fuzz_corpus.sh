#!/usr/bin/env bash
# Regenerates the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/) from files
# the tool itself writes and reads: weights files from gen-weights, the presets and HF
# configs the tests use (GPTQ, AWQ and FP8 ones among them, and extends chains), adapter specs and
# the PEFT test adapter's config, result files of runs, a sweep with an error entry and a
# report array, and the micro model's GPTQ, AWQ and FP8 checkpoints. Committed; rerun after a format
# changes.
#   scripts/fuzz_corpus.sh [BUILD_DIR]    a build holding the decodebench binary (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:-build}/decodebench")
out=tests/fuzz/corpus
micro=tests/fuzz/micro.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out"/{safetensors_header,config,adapter,result,int4_checkpoint}

# safetensors_header: the micro model in each scheme (and int4 without zero points, with an
# int8 lm_head), as gen-weights writes them.
for q in fp16 int8 int4; do
  "$bin" gen-weights --model "$micro" --quant "$q" -o "$out/safetensors_header/micro-$q.safetensors" >/dev/null
done
printf '{"extends": "%s", "quant": {"scheme": "int4", "group_size": 16, "zero_point": false, "lm_head": "int8"}}\n' \
  "$PWD/$micro" >"$tmp/sym.json"
"$bin" gen-weights --model "$tmp/sym.json" -o "$out/safetensors_header/micro-int4-sym.safetensors" >/dev/null

# config: presets, HF config.json files, and two files where one extends the other (the
# target writes what follows a "#base" line as base.json beside the config).
for c in tiny tiny-int4 1b 4b-int8 8b 70b-int4 qwen2-0.5b; do cp "configs/$c.json" "$out/config/preset-$c.json"; done
for c in gemma2_2b llama31_8b llama32_1b mistral_7b_v01 qwen25_0_5b qwen3_4b user_extends_preset; do
  cp "tests/data/configs/$c.json" "$out/config/$c.json"
done
cp tests/data/configs/tiny_llama_transformers5/config.json "$out/config/hf-transformers5.json"
cp tests/data/hf/tiny-llama/config.json "$out/config/hf-tiny-llama.json"
cp tests/data/hf/tiny-qwen3/config.json "$out/config/hf-tiny-qwen3.json"
cp "$micro" "$out/config/micro.json"
{ printf '{"extends": "base.json", "quant": {"lm_head": "int8"}}\n#base\n'; cat tests/data/configs/user_extends_preset.json; } \
  >"$out/config/extends-file.json"
{ printf '{"extends": "base.json", "num_hidden_layers": 1}\n#base\n'; cat tests/data/hf/tiny-llama/config.json; } \
  >"$out/config/extends-hf.json"
printf '{"extends": "base.json"}\n#base\n{"extends": "model.json"}\n' >"$out/config/extends-cycle.json"
# Chains (the target writes N links of the config, each extending the next): within the
# limit of 64 configs, and past it.
for n in 8 70; do
  { printf '#chain %s\n{"extends": "@next", "num_hidden_layers": 1}\n#base\n' "$n"; cat configs/tiny.json; } \
    >"$out/config/extends-chain-$n.json"
done
# GPTQ and AWQ config.json files, one leaving modules unquantized.
for f in gptq-v1-sym gptq-v1-asym gptq-v2-asym awq; do cp "tests/data/int4/$f/config.json" "$out/config/hf-$f.json"; done
for f in fp8-channel fp8-tensor ct-channel; do cp "tests/data/fp8/$f/config.json" "$out/config/hf-$f.json"; done
python3 - "$out/config/hf-gptq-v1-asym.json" "$out/config/hf-gptq-skip.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"]["modules_to_not_convert"] = ["lm_head", "visual.blocks.0", "layers.9.mlp"]
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY

# int4_checkpoint: the micro model's GPTQ and AWQ checkpoints (scripts/make_int4_checkpoints.py
# --micro): config.json, a line "#weights", model.safetensors.
python3 scripts/make_int4_checkpoints.py --micro "$tmp/int4"
for f in gptq-v1-sym gptq-v1-asym gptq-v2-asym awq; do
  { cat "$tmp/int4/$f/config.json"; printf '\n#weights\n'; cat "$tmp/int4/$f/model.safetensors"; } \
    >"$out/int4_checkpoint/$f"
done
# ... and its FP8 ones (scripts/make_fp8_checkpoints.py --micro), which the target reads alike.
python3 scripts/make_fp8_checkpoints.py --micro "$tmp/fp8"
for f in fp8-channel fp8-tensor ct-channel; do
  { cat "$tmp/fp8/$f/config.json"; printf '\n#weights\n'; cat "$tmp/fp8/$f/model.safetensors"; } \
    >"$out/int4_checkpoint/$f"
done

# adapter: 'S' + an --adapter spec, or 'P' + an adapter_config.json (loaded with a rank-4
# adapter of the micro model for all seven linears).
printf 'Ssynthetic:rank=4' >"$out/adapter/spec-rank4"
printf 'Ssynthetic:rank=2,alpha=16,targets=q,v,rslora=true' >"$out/adapter/spec-qv"
printf 'Ssynthetic:rank=8,targets=gate,up,down,alpha=-3.5' >"$out/adapter/spec-mlp"
lora=tests/data/hf/tiny-llama-lora/adapter_config.json
{ printf 'P'; cat "$lora"; } >"$out/adapter/peft-list"
python3 - "$lora" "$out/adapter" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
for name, targets in [("peft-all-linear", "all-linear"),
                      ("peft-regex", r"model\.layers\.\d+\.(self_attn|mlp)\.(q|k|v|o|gate|up|down)_proj"),
                      ("peft-regex-partial", r".*\.(q_proj|v_proj)")]:
    c = dict(config, target_modules=targets)
    open(f"{sys.argv[2]}/{name}", "w").write("P" + json.dumps(c, indent=2))
PY

# result: runs of the micro model on the CPU backend, as json and jsonl, one with an
# external adapter, a sweep whose second instance fails (an error entry), a report array.
run=("$bin" run --model "$micro" --backend cpu --tokens 3 --repeat 2 --warmup 1)
"${run[@]}" -o "$out/result/run.json" >/dev/null
"${run[@]}" --quant int4 -o "$out/result/run-int4.jsonl" >/dev/null
"${run[@]}" --adapter synthetic:rank=2 --adapter-mode external -o "$out/result/run-adapter.json" >/dev/null
"$bin" sweep --model "$micro" --backend cpu --tokens 2 --repeat 1 --warmup 0 --kernel auto,int4.gemv \
  -o "$out/result/sweep.jsonl" >/dev/null 2>&1 || true
"$bin" report "$out/result/run.json" "$out/result/run-adapter.json" --format json -o "$out/result/array.json" \
  >/dev/null
ls -l "$out"/*
