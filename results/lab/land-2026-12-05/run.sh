#!/usr/bin/env bash
# One device call on the landing tree (land3: main + the int8 tiles GEMV + the tiles GEMV's
# timed shapes two steps ahead + the wgmma prefill attention), `run` with carry [".debs"]:
# bash results/lab/land-2026-12-05/run.sh. Within 600 s: the build (DEV, sm_90), the gpu tests
# of what lands, then the batch sweeps of 8b-int4, 8b-int8 and 1b-int4 (graph on) and 8b-int4
# prefilling 131000 tokens. Out: summary.txt and land.tar.gz (the logs and result files).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/land-2026-12-05/out}
raw=$out/raw
mkdir -p "$raw"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_PREFILL_ATTENTION
left() { echo $((585 - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary.txt") 2>&1
finish() { tar -C "$out" -czf "$out/land.tar.gz" raw && rm -rf "$raw"; }

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 300 cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } >"$raw/build.log" 2>&1 ||
  { grep -E "error" "$raw/build.log" | head -30; tail -5 "$raw/build.log"; finish; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv,noheader
t built

timeout $(cap 200) $b/decodebench_gpu_tests --gtest_filter='Shapes/TilesTest.*:Tiles.*:TilesLayout.*:Shapes/Int8TilesTest.*:Int8Tiles*:EngineBatch*:Chunks/PrefillAttentionWgmma.*:Kernels/PrefillVsSteps.*:Prefill.*' \
  >"$raw/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$raw/gpu.txt" | head -12; t gpu

sweep() {  # NAME MODEL BATCHES
  timeout $(cap 70) $b/decodebench sweep --model $2 --graph on --batch "$3" --tokens 32 --repeat 2 \
    -o "$raw/$1.jsonl" >"$raw/$1.txt" 2>&1
  echo "sweep $1 rc $?"; grep -iE "error" "$raw/$1.txt" | head -2
}
sweep 8b-int4 8b-int4 1,2,4,8,16
sweep 8b-int8 8b-int8 1,2,4,8,16
sweep 1b-int4 1b-int4 1,2,8,16
sweep 8b-fp16 8b-fp16 1,2,8
t sweeps
python3 - "$raw" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    base = None
    for l in open(f):
        if not l.strip():
            continue
        r = json.loads(l); c = r["config"]; B = c.get("batch", 1); v = r["timing"]["tpot_ms"]["median"]
        base = v if B == 1 else base
        paths = sorted({p.split(": ")[1] for p in c.get("batched_paths", [])})
        rel = f" {v / base:.3f}x batch 1" if base and B > 1 else ""
        shapes = "; ".join(c.get("kernel_shapes", []))
        print(f"{os.path.basename(f)[:-6]:8s} B={B:3d} TPOT {v:.3f} ms{rel} {','.join(paths)} {shapes}")
PY
timeout $(cap 80) $b/decodebench --model 8b-int4 --graph on --context 131000 --tokens 16 --repeat 1 \
  -o "$raw/ctx131000.json" >"$raw/ctx131000.txt" 2>&1
echo "prefill rc $?"; grep -iE "^prefill|error" "$raw/ctx131000.txt" | head -2; t prefill
finish
