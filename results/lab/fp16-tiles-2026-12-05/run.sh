#!/usr/bin/env bash
# One device call on branch fp16-tiles (batch.md §36), `run` with carry [".debs"]:
# bash results/lab/fp16-tiles-2026-12-05/run.sh. Within 600 s: the build (DEV, sm_90), the bench
# --fp16 (checks, one 8b-fp16 layer and the 8b lm_head: the tiles GEMV beside the fp16 rows GEMV
# at 1 sequence and cuBLAS at each batch), the fp16 tiles gpu tests and the engine's batch tests,
# then the steps: 8b-fp16 at 1/2/4/8/16 sequences with the fp16 tiles and with
# DECODEBENCH_FP16_TILES=off, 8b-int4 and 1b-int4 at 8 and 16 with the switch on and off (their
# fp16 lm_head), graph on, 32 tokens, 2 repeats. Out (5 files): summary.txt (TPOT and the ratios
# to batch 1), build.log, bench.jsonl, gpu.txt, runs.tar.gz (the sweeps' results and logs).
# Predicted (before running): one 8b-fp16 layer at 2 and 8 sequences within 1.05x of the fp16
# rows GEMV at 1; 8b-fp16's step at 8 <= 1.08x its batch 1 (bar 1.10; 1.242x on cuBLAS); 8b-int4
# at 16 2.506 -> ~2.43-2.47 ms, 1b-int4 at 16 0.667 -> ~0.64 ms (the lm_head's share).
# Kill: one 8b-fp16 layer at 8 sequences above 1.15x the fp16 rows GEMV at 1 in the bench.
# Estimate: build ~80-250 s (74 s on the landing call's machine), bench ~40 s, gpu tests ~60 s,
# six sweeps ~40 s each (8b-fp16's load 16 GB twice a sweep): ~420-590 s; every step is capped by
# what is left of 585 s, the sweeps last, so the outputs always come back.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/fp16-tiles-2026-12-05/out}
raw=$out/raw
mkdir -p "$raw"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_FP16_TILES
left() { echo $((585 - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary.txt") 2>&1
finish() { tar -C "$out" -czf "$out/runs.tar.gz" raw && rm -rf "$raw"; }

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 300 cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_tiles_gemv_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; finish; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv,noheader
git log --oneline -1
t built

timeout $(cap 90) $b/decodebench_tiles_gemv_bench --fp16 >"$out/bench.jsonl" 2>&1
echo "bench rc $?"
python3 - "$out/bench.jsonl" <<'PY'
import json, sys
rows = {}
for l in open(sys.argv[1]):
    if not l.startswith("{"):
        print(l.rstrip()[:200]); continue
    r = json.loads(l)
    if "checks" in r: print("checks", r["checks"]); continue
    if "kernel" not in r: continue
    rows.setdefault(r["set"], []).append(r)
for s, rs in rows.items():
    base = next((r["us_layer"] for r in rs if r["kernel"] == "rows_gemv"), None)
    print(f"{s}: rows GEMV at 1: {base} us")
    for b in (1, 2, 3, 4, 8, 9, 16):
        at = [r for r in rs if r["batch"] == b]
        if not at: continue
        best = min((r for r in at if r["kernel"] == "tiles"), key=lambda r: r["us_layer"], default=None)
        dflt = next((r for r in at if r["kernel"] == "tiles_default"), None)
        cub = next((r for r in at if r["kernel"] == "cublas"), None)
        f = lambda r: f"{r['us_layer']:.1f} us ({r['us_layer'] / base:.3f}x, {r['gbps']} GB/s)" if r else "-"
        print(f"  B={b:2d} tiles best {best['shape'] if best else '-'} {f(best)}; default {f(dflt)}; cublas {f(cub)}")
PY
t bench

timeout $(cap 150) $b/decodebench_gpu_tests \
  --gtest_filter='Shapes/Fp16TilesTest.*:Fp16Tiles.*:Fp16TilesLayout.*:*EngineBatch*:Kernels/PrefillVsSteps.*:Prefill.*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$out/gpu.txt" | head -20; t gpu

sweep() {  # NAME MODEL BATCHES [VAR=VALUE]
  timeout $(cap 90) env ${4:-} $b/decodebench sweep --model $2 --graph on --batch "$3" --tokens 32 --repeat 2 \
    -o "$raw/$1.jsonl" >"$raw/$1.txt" 2>&1
  echo "sweep $1 rc $?"; grep -iE "error" "$raw/$1.txt" | head -2; t "$1"
}
sweep 8b-fp16 8b-fp16 1,2,4,8,16
sweep 8b-fp16-off 8b-fp16 1,2,4,8,16 DECODEBENCH_FP16_TILES=off
sweep 8b-int4 8b-int4 1,8,16
sweep 8b-int4-off 8b-int4 1,8,16 DECODEBENCH_FP16_TILES=off
sweep 1b-int4 1b-int4 1,8,16
sweep 1b-int4-off 1b-int4 1,8,16 DECODEBENCH_FP16_TILES=off
python3 - "$raw" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    base = None
    for l in open(f):
        if not l.strip():
            continue
        r = json.loads(l); c = r["config"]; B = c.get("batch", 1); v = r["timing"]["tpot_ms"]["median"]
        base = v if B == 1 else base
        paths = "; ".join(p for p in c.get("batched_paths", []) if "lm_head" in p or "gate_up" in p)
        rel = f" {v / base:.3f}x batch 1" if base and B > 1 else ""
        shapes = "; ".join(s for s in c.get("kernel_shapes", []) if "lm_head" in s or "gate_up" in s)
        print(f"{os.path.basename(f)[:-6]:12s} B={B:3d} TPOT {v:.3f} ms{rel} [{paths}] {shapes}")
PY
t done
finish
