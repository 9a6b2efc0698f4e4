#!/usr/bin/env bash
# Device call 1 (bash results/lab/attn-pair-2026-12-05/run.sh, `run` with carry [".debs"]): the
# decode attention with two tiles in flight a warp (attention.md §24) against one, side by
# side on one card. Within 600 s (estimate: build ~90 s, bench ~80, the two step sweeps ~60
# each, gpu tests ~170: ~460 s; the tests go last and take what is left, up to 300):
#   1. the bench, one 8b layer, each case at one tile a step and two (--step-tiles 0: both);
#   2. the step, 8b-int4 graph on, fp16 and fp8 KV at 32768 and 131000, one sweep a setting
#      of DECODEBENCH_ATTENTION_PAIR (off: one tile at a time; on: two);
#   3. the gpu attention tests (every case runs both), under timeout 300.
# Predicted (before running): us_train fp8 131000 75.6 -> 68-71 us, fp16 32768 37.3 -> 35.5-38
# (fp16 at head_dim 128 has 2 stages a warp: a pair leaves none of its copies in flight);
# the step fp8 131000 4.04-4.12 -> ~3.87-3.93 ms, fp16 32768 2.746-2.771 -> ~2.72-2.76.
# Kill: us_train fp8 131000 not below 72 us, or fp16 32768 not below 36 us, in this call.
# Out (under $OUT, 5 files): summary.txt, attn.jsonl, gpu.txt, build.log (on a failure),
# runs.tar.gz (the step's result files and logs).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/attn-pair-2026-12-05/out1}
raw=$out/runs
mkdir -p "$raw"
unset DECODEBENCH_ATTENTION_PAIR DECODEBENCH_PREFILL_ATTENTION
left() { echo $((585 - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary.txt") 2>&1
finish() { tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$raw"; }

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 300 cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_attention_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; finish; exit 1; }
rm -f "$out/build.log"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv,noheader
t built

# 1. One 8b layer: attention(), then attention_mma() at one tile a step and two, same grid.
ab=$b/decodebench_attention_bench
for run in "fp16 32768" "fp8 32768" "fp8 131000" "int8 131000" "fp16 131000"; do
  set -- $run
  timeout $(cap 60) $ab --only 8b --positions $2 --kv $1 --reps 10 --step-tiles 0
done >"$out/attn.jsonl" 2>&1
python3 - "$out/attn.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"model"')]
by = {}
for r in rows:
    if r["kernel"] == "attention_mma":
        by.setdefault((r["kv"], r["positions"]), {})[r["step_tiles"]] = r
print("kv    positions  us_train 1 tile  2 tiles   ratio  of_read_train 1 / 2")
for (kv, n), d in by.items():
    if 1 in d and 2 in d:
        a, b = d[1], d[2]
        print(f"{kv:5s} {n:9d}  {a['us_train']:14.2f} {b['us_train']:8.2f}  {b['us_train'] / a['us_train']:6.3f}"
              f"  {a['of_read_train']:.3f} / {b['of_read_train']:.3f}")
PY
t bench

# 2. The step: one sweep a setting (the weights load once a sweep).
for pair in off on; do
  DECODEBENCH_ATTENTION_PAIR=$pair timeout $(cap 150) $b/decodebench sweep --model 8b-int4 --graph on \
    --kv-cache fp16,fp8 --context 32768,131000 --tokens 32 --repeat 2 -o "$raw/step-pair-$pair.jsonl" \
    >"$raw/step-pair-$pair.txt" 2>&1
  echo "sweep pair $pair rc $?"; grep -iE "error" "$raw/step-pair-$pair.txt" | head -2
  t "step pair $pair"
done
python3 - "$raw" <<'PY'
import json, sys, os
for pair in ("off", "on"):
    f = os.path.join(sys.argv[1], f"step-pair-{pair}.jsonl")
    if not os.path.exists(f):
        continue
    for l in open(f):
        if not l.strip():
            continue
        r = json.loads(l); c = r["config"]; t = r["timing"]
        print(f"pair {pair:3s} kv {c.get('kv_cache', 'fp16'):4s} context {c.get('context', 0):6d} "
              f"TPOT {t['tpot_ms']['median']:.3f} ms ({t.get('decode_attention', '?')})")
PY

# 3. Correctness: every case runs one tile a step and two against the same reference.
timeout $(cap 300) $b/decodebench_gpu_tests \
  --gtest_filter='HeadSizesSchemesAndWarps/AttentionMma.*:AttentionMmaExtras.*:AttentionMmaWarps.*:AttentionLongCache.*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$out/gpu.txt" | head -12
grep -E "largest error" "$out/gpu.txt" | awk '{print $(NF-3)}' | sort -g | tail -1 | sed 's/^/worst error, of its bound: /'
t gpu
finish
