#!/usr/bin/env bash
# compute-sanitizer memcheck over the tiny model, eager and graph, past one attention split.
# Exit 77 (CTest: skipped) where there is no GPU or no compute-sanitizer.
#   scripts/memcheck.sh path/to/decodebench
set -uo pipefail
bin=$1
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ ! -x "$san" ]; then echo "SKIPPED: no compute-sanitizer"; exit 77; fi
if ! "$bin" info >/dev/null 2>&1; then echo "SKIPPED: no usable CUDA GPU"; exit 77; fi
for graph in off on; do
  for q in fp16 int8 int4; do
    "$san" --tool memcheck --error-exitcode 1 --print-limit 20 \
      "$bin" --model "tiny-$q" --graph "$graph" --context 70 --tokens 4 --warmup 1 --repeat 1 >/dev/null || {
      echo "memcheck failed: tiny-$q graph $graph"; exit 1; }
  done
done
# LoRA: the shrink and expand kernels before every kind of GEMV epilogue (a cuBLAS path
# included), and the device merge.
for args in "tiny-fp16 auto external" "tiny-int8 int8.dequant-cublas external" "tiny-int4 auto external" \
            "tiny-int4 auto merged"; do
  set -- $args
  "$san" --tool memcheck --error-exitcode 1 --print-limit 20 \
    "$bin" --model "$1" --kernel "$2" --adapter synthetic:rank=3 --adapter-mode "$3" --graph off --tokens 4 \
    --warmup 1 --repeat 1 >/dev/null || { echo "memcheck failed: $1 $2 LoRA $3"; exit 1; }
done
echo "memcheck clean: tiny-{fp16,int8,int4}, graph off and on, context 70; LoRA external and merged"
