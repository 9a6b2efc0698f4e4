#!/usr/bin/env bash
# The device queue on branch queue4 (main + batch-edges + fp16-tiles + mixed-mid + attn-pair),
# `run` with carry [".debs"], one warm machine, in this order (each within 600 s):
#   bash results/lab/queue-2026-12-05b/run.sh benches   # build; the three kill criteria's benches
#   bash results/lab/queue-2026-12-05b/run.sh steps     # the step: each change against its switch
#   bash results/lab/queue-2026-12-05b/run.sh kernels   # gpu tests of the new kernels
#   bash results/lab/queue-2026-12-05b/run.sh engine    # gpu tests of the engine (EngineBatch*, ...)
#   bash results/lab/queue-2026-12-05b/run.sh tests     # kernels and engine in one call
#   bash results/lab/queue-2026-12-05b/run.sh sweep     # the batch sweep for README; batch 1 against the matrix
# Predictions and kill criteria, written before running: batch.md §36 (fp16 tiles), §37 (mixed
# GEMM at 17-128), §38 (norms at the tiles GEMV's edges), attention.md §24 (two tiles a warp).
# Out: summary-<mode>.txt and <mode>.tar.gz.
set -uo pipefail
mode=${1:?benches, steps, kernels or engine}
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/queue-2026-12-05b/out}
raw=$out/$mode
mkdir -p "$raw"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_FP16_TILES \
  DECODEBENCH_BATCHED_FUSION DECODEBENCH_MIXED_GEMM DECODEBENCH_ATTENTION_PAIR DECODEBENCH_PREFILL_ATTENTION
left() { echo $((580 - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary-$mode.txt") 2>&1
finish() { tar -C "$out" -czf "$out/$mode.tar.gz" "$mode" && rm -rf "$raw"; }

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout $(cap 400) cmake --build $b -j16 --target decodebench decodebench_gpu_tests \
    decodebench_tiles_gemv_bench decodebench_mixed_wgmma_bench decodebench_attention_bench; } \
  >"$raw/build.log" 2>&1 || { grep -E "error" "$raw/build.log" | head -30; tail -5 "$raw/build.log"; finish; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv,noheader
t built

# A sweep's TPOT a row, its multiple of batch 1 where the file has it, and what ran.
table() {
  python3 - "$@" <<'PY'
import json, sys, os
for f in sys.argv[1:]:
    base = None
    for l in open(f):
        if not l.strip():
            continue
        r = json.loads(l); c = r["config"]; B = c.get("batch", 1); v = r["timing"]["tpot_ms"]["median"]
        base = v if B == 1 and c.get("context", 0) == 0 else base
        lines = c.get("batched_paths", [])
        paths = sorted({p.split(": ", 1)[1] for p in lines if " [" in p})
        edges = [p.split(": ", 1)[1] for p in lines if p.startswith("rmsnorm and silu")]
        rel = f" {v / base:.3f}x" if base and B > 1 else ""
        kv = f" ctx {c.get('context', 0)} {c.get('kv_cache', '')} {r['timing'].get('decode_attention', '')}" \
            if c.get("context", 0) else ""
        print(f"{os.path.basename(f)[:-6]:18s} B={B:3d}{kv} TPOT {v:.3f} ms{rel} {','.join(paths)} {edges[0] if edges else ''}")
PY
}
sweep() {  # NAME ENV-ASSIGNMENT|- DECODEBENCH-SWEEP-ARGS...
  local name=$1 envset=$2; shift 2
  if [ "$envset" = - ]; then envset=DECODEBENCH_UNUSED=1; fi
  env "$envset" timeout $(cap 120) $b/decodebench sweep --graph on --tokens 32 --repeat 2 "$@" \
    -o "$raw/$name.jsonl" >"$raw/$name.txt" 2>&1
  echo "sweep $name rc $?"; grep -iE "error" "$raw/$name.txt" | head -2
}

case $mode in
benches)
  # fp16 tiles (§36; kill: one 8b-fp16 layer at 8 above 1.15x the fp16 rows GEMV at 1).
  timeout $(cap 100) $b/decodebench_tiles_gemv_bench --fp16 >"$raw/tiles-fp16.jsonl" 2>&1
  echo "tiles --fp16 rc $?"; grep -E '"checks"|layer|lm_head' "$raw/tiles-fp16.jsonl" | cut -c1-200 | head -30
  t tiles
  # The decode attention one and two tiles a warp (§24; kill: fp8 131000 us_train not below 72, or
  # fp16 32768 not below 36).
  for run in "fp16 32768" "fp8 32768" "fp8 131000" "int8 131000" "fp16 131000"; do
    set -- $run
    timeout $(cap 60) $b/decodebench_attention_bench --only 8b --positions $2 --kv $1 --reps 10 --step-tiles 0
  done >"$raw/attn.jsonl" 2>&1
  python3 - "$raw/attn.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"model"')]
by = {}
for r in rows:
    if r["kernel"] == "attention_mma":
        by.setdefault((r["kv"], r["positions"]), {})[r["step_tiles"]] = r
for (kv, n), d in by.items():
    if 1 in d and 2 in d:
        print(f"attn {kv:5s} {n:7d} us_train 1 tile {d[1]['us_train']:.2f}, 2 tiles {d[2]['us_train']:.2f}"
              f" ({d[2]['us_train'] / d[1]['us_train']:.3f})")
PY
  t attention
  # The mixed GEMM's checks against the CPU, then one 8b layer at 16-128 beside cuBLAS fp16.
  timeout $(cap 60) $b/decodebench_mixed_wgmma_bench --check-only >"$raw/mixed-check.jsonl" 2>&1
  echo "mixed check rc $?"; grep -E '"checks"' "$raw/mixed-check.jsonl" | head -3
  t mixed
  ;;
steps)
  # The norms at the edges (§38; kill: 8b-int4 at 2 less than 50 us faster than with them off).
  sweep 8b-int4-edges - --model 8b-int4 --batch 1,2,8,16
  sweep 8b-int4-kernels DECODEBENCH_BATCHED_FUSION=off --model 8b-int4 --batch 1,2,8,16
  sweep 1b-int4-edges - --model 1b-int4 --batch 1,2,8,16
  sweep 1b-int4-kernels DECODEBENCH_BATCHED_FUSION=off --model 1b-int4 --batch 1,2,8,16
  sweep 8b-int8-edges - --model 8b-int8 --batch 1,2,8,16
  # The fp16 tiles (§36).
  sweep 8b-fp16-tiles - --model 8b-fp16 --batch 1,2,4,8,16
  sweep 8b-fp16-cublas DECODEBENCH_FP16_TILES=off --model 8b-fp16 --batch 2,4,8,16
  # The mixed GEMM (§37; kill: 8b-int4 at 64 not faster than with it off).
  sweep 8b-int4-mixed - --model 8b-int4 --batch 32,64,128
  sweep 8b-int4-nomixed DECODEBENCH_MIXED_GEMM=off --model 8b-int4 --batch 32,64,128
  sweep 8b-fp16-mid - --model 8b-fp16 --batch 32,64,128
  # Two tiles a warp in the step (§24).
  sweep ctx-pair - --model 8b-int4 --kv-cache fp16,fp8 --context 32768,131000
  sweep ctx-single DECODEBENCH_ATTENTION_PAIR=off --model 8b-int4 --kv-cache fp16,fp8 --context 32768,131000
  t sweeps
  table "$raw"/*.jsonl
  ;;
kernels)
  timeout $(cap 520) $b/decodebench_gpu_tests --gtest_filter='Shapes/TilesEdgesTest.*:TilesEdges.*:Shapes/Fp16TilesTest.*:Fp16Tiles*:Shapes/MixedGemmTest.*:MixedGemm.*:HeadSizesSchemesAndWarps/AttentionMma.*:Warps/AttentionMmaQwen.*:AttentionMmaExtras.*:AttentionMmaWarps.*:AttentionLongCache.*:Shapes/TilesTest.*:Tiles.*:TilesLayout.*:Shapes/Int8TilesTest.*:Int8Tiles*' \
    >"$raw/gpu.txt" 2>&1
  echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$raw/gpu.txt" | head -20
  t kernels
  ;;
engine)
  timeout $(cap 520) $b/decodebench_gpu_tests --gtest_filter='EngineBatch*:Kernels/EngineBatch.*:Kernels/PrefillVsSteps.*:Prefill.*:*Golden*' \
    >"$raw/gpu.txt" 2>&1
  echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$raw/gpu.txt" | head -20
  t engine
  ;;
tests)
  timeout $(cap 540) $b/decodebench_gpu_tests --gtest_filter='Shapes/TilesEdgesTest.*:TilesEdges.*:Shapes/Fp16TilesTest.*:Fp16Tiles*:Shapes/MixedGemmTest.*:MixedGemm.*:HeadSizesSchemesAndWarps/AttentionMma.*:Warps/AttentionMmaQwen.*:AttentionMmaExtras.*:AttentionMmaWarps.*:AttentionLongCache.*:Shapes/TilesTest.*:Tiles.*:TilesLayout.*:Shapes/Int8TilesTest.*:Int8Tiles*:EngineBatch*:Kernels/EngineBatch.*:Kernels/PrefillVsSteps.*:Prefill.*:*Golden*' \
    >"$raw/gpu.txt" 2>&1
  echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$raw/gpu.txt" | head -20
  t tests
  ;;
sweep)
  timeout $(cap 420) $b/decodebench sweep --model 8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int8,1b-int4 --graph on \
    --batch 1-256*2 --tokens 64 --warmup 16 --repeat 3 -o "$raw/batch-sweep.jsonl" >"$raw/sweep.txt" 2>&1
  echo "sweep rc $?"; tail -2 "$raw/sweep.txt"; t sweep
  table "$raw/batch-sweep.jsonl"
  $b/decodebench report results/h200/{8b,1b}-{fp16,int8,int4}-graph-on.json --format jsonl >"$raw/base.jsonl"
  python3 -c "import json,sys; [print(l, end='') for l in open(sys.argv[1]) if json.loads(l)['config'].get('batch', 1) == 1]" \
    "$raw/batch-sweep.jsonl" >"$raw/b1.jsonl"
  $b/decodebench compare "$raw/base.jsonl" "$raw/b1.jsonl" --threshold 1% >"$raw/b1-compare.md" 2>&1
  echo "compare exit $?: $(grep -E ' matched: ' "$raw/b1-compare.md")"
  ;;
*)
  echo "unknown mode $mode"
  ;;
esac
finish
