#!/usr/bin/env bash
# One device call on branch batch-edges (batch.md §38: the batched step's RMSNorms and SiLU at
# the tiles GEMV's edges), `run` with carry [".debs"]: bash results/lab/batch-edges-2026-12-05/run.sh.
# Within 600 s: the build (DEV, sm_90), the gpu tests of the edges and of the batched engine,
# then 8b-int4, 8b-int8 and 1b-int4 at 1, 2, 8 and 16 sequences (graph on) with the edges
# (default) and with DECODEBENCH_BATCHED_FUSION=off, side by side in one lease.
# Predicted (before running): 8b-int4 at 2 sequences 1.861 -> 1.66-1.74 ms (0.12-0.20 ms
# saved: 97 kernels' exposed ~1.3-3.4 us each, batch.md §10-§11), at 16 -> 2.30-2.39; 1b-int4
# at 2 0.534 -> 0.47-0.50; 8b-int8 at 2 2.560 -> 2.36-2.44. Kill: 8b-int4 at 2 sequences less
# than 50 us faster than with the variable off, or an EngineBatch* or TilesEdges* test failing.
# Out: summary.txt and edges.tar.gz (the logs and result files).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/batch-edges-2026-12-05/out}
raw=$out/raw
mkdir -p "$raw"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_BATCHED_FUSION
left() { echo $((585 - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary.txt") 2>&1
finish() { tar -C "$out" -czf "$out/edges.tar.gz" raw && rm -rf "$raw"; }

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 300 cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } >"$raw/build.log" 2>&1 ||
  { grep -E "error" "$raw/build.log" | head -30; tail -5 "$raw/build.log"; finish; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv,noheader
t built

timeout $(cap 200) $b/decodebench_gpu_tests \
  --gtest_filter='Shapes/TilesEdgesTest.*:TilesEdges.*:EngineBatch*:Shapes/TilesTest.*:Shapes/Int8TilesTest.*' \
  >"$raw/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$raw/gpu.txt" | head -12; t gpu

sweep() {  # NAME MODEL BATCHES [off]
  if [ "${4:-}" = off ]; then export DECODEBENCH_BATCHED_FUSION=off; else unset DECODEBENCH_BATCHED_FUSION; fi
  timeout $(cap 70) $b/decodebench sweep --model $2 --graph on --batch "$3" --tokens 32 --repeat 2 \
    -o "$raw/$1.jsonl" >"$raw/$1.txt" 2>&1
  echo "sweep $1 rc $?"; grep -iE "error" "$raw/$1.txt" | head -2
  unset DECODEBENCH_BATCHED_FUSION
}
sweep 8b-int4-edges 8b-int4 1,2,8,16
sweep 8b-int4-kernels 8b-int4 1,2,8,16 off
sweep 1b-int4-edges 1b-int4 1,2,8,16
sweep 1b-int4-kernels 1b-int4 1,2,8,16 off
sweep 8b-int8-edges 8b-int8 1,2,8,16
sweep 8b-int8-kernels 8b-int8 1,2,8,16 off
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
        lines = c.get("batched_paths", [])
        edges = [p.split(": ", 1)[1] for p in lines if p.startswith("rmsnorm and silu")]
        rel = f" {v / base:.3f}x batch 1" if base and B > 1 else ""
        print(f"{os.path.basename(f)[:-6]:16s} B={B:3d} TPOT {v:.3f} ms{rel} {edges[0] if edges else ''}")
PY
finish
