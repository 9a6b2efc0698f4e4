#!/usr/bin/env bash
# The LoRA benchmark: a rank-16 LoRA adapter on all seven linears of 8b-int4 and 8b-fp16,
# applied externally or merged into the weights, graph on and off, next to the base model.
# Writes one JSON per run and lora.md (decodebench report) into OUT.
#   scripts/bench_lora.sh [BUILD_DIR] [OUT_DIR] [extra decodebench options...]
set -euo pipefail
build=${1:-build}
out=${2:-results/h200/lora}
shift $(( $# > 2 ? 2 : $# )) || true
mkdir -p "$out"
bin="$build/decodebench"
extra=("$@")
run() {  # name, options...
  local name=$1; shift
  echo "== $name: decodebench $*" >&2
  "$bin" "$@" --tokens 128 --warmup 16 --repeat 5 -o "$out/$name.json" "${extra[@]}" >/dev/null
}
adapter="synthetic:rank=16,targets=q,k,v,o,gate,up,down"
for m in 8b-int4 8b-fp16; do
  for g in on off; do
    run "$m-base-graph-$g" --model "$m" --graph "$g"
    for mode in external merged; do
      run "$m-lora-$mode-graph-$g" --model "$m" --graph "$g" --adapter "$adapter" --adapter-mode "$mode"
    done
  done
done
"$bin" report "$out"/*.json --format md > "$out/lora.md"
echo "wrote $out/lora.md" >&2
