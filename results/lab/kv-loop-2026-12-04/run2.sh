#!/usr/bin/env bash
# Device call 2 (bash results/lab/kv-loop-2026-12-04/run2.sh): the decode attention loop with
# fewer instructions a tile (attention.md §23): copies whose offsets are compile-time constants
# but one a row group, ex2.approx.ftz for the softmax, the accumulators rescaled only in tiles
# where a row's max (or, 8-bit caches, the warp's largest V scale) grew.
# Predicted (before running; run 1's ncu: fp8 at 131000 ~560 instructions a tile, issue 51%
# busy; fp16 at 32768 ~426, waiting on its copies): one 8b layer us_train fp8 131000
# 77.1 -> 68-71 us, fp16 32768 37.9 -> 36.5-37.5, fp16 131000 134 -> ~131; the step 8b-int4
# fp8 131000 4.177 -> ~3.95 ms, fp16 32768 2.792 -> ~2.76-2.78.
# Kill: fp8 131000 us_train not below 73 us.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/kv-loop-2026-12-04/out2}
mkdir -p "$out/runs"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_attention_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
ab=$b/decodebench_attention_bench
{
  timeout 60 $ab --only 8b --positions 32768 --kv fp16 --reps 10
  timeout 60 $ab --only 8b --positions 32768 --kv fp8 --reps 10
  timeout 60 $ab --only 8b --positions 131000 --kv fp8 --reps 10
  timeout 60 $ab --only 8b --positions 131000 --kv int8 --reps 10
  timeout 60 $ab --only 8b --positions 131000 --kv fp16 --reps 10
} >"$out/attn.jsonl" 2>&1
grep attention_mma "$out/attn.jsonl" | cut -c1-240; t attn
timeout 240 $b/decodebench_gpu_tests \
  --gtest_filter='HeadSizesSchemesAndWarps/AttentionMma.*:AttentionMmaExtras.*:AttentionMmaWarps.*:AttentionLongCache.*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "FAILED|tests ran|PASSED|Failure|largest error" "$out/gpu.txt" | sort | uniq -c | sort -rn | head -20; t gpu
for run in "fp16 32768" "fp8 32768" "fp8 131000" "fp16 131000"; do
  set -- $run; kv=$1; ctx=$2
  timeout 90 $b/decodebench --model 8b-int4 --graph on --context $ctx --kv-cache $kv --tokens 32 --repeat 2 \
    -o "$out/runs/8b-int4-ctx$ctx-$kv.json" 2>&1 | grep -E "TPOT|prefill |rror" | grep -v " on cuda: " | sed "s/^/ctx $ctx $kv: /"
  t "ctx $ctx $kv"
done
tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$out/runs"
