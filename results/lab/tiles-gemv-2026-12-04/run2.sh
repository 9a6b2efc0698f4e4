#!/usr/bin/env bash
# One device call (bash results/lab/tiles-gemv-2026-12-04/run2.sh; `run` on one H200 with carry
# [".debs"] where the checkout has one): the tiles GEMV's first run, in the bench and in the
# product, on the tiles-land tree where the plan routes int4 at 2-16 sequences to it
# (README.md here). In order, each under a timeout, the call within 600 s:
#   1. build decodebench and the bench (DEV, sm_90);
#   2. the bench: its checks against the CPU (every shape, 1-16 sequences), then one 8b layer at
#      1-16 sequences beside the rows GEMV at 1, every shape and the default;
#   3. the step: 8b-int4, graph on, --tokens 32 --repeat 1, at 1, 2, 8, 16 with
#      DECODEBENCH_INT4_TILES=off (the columns GEMV and the skinny GEMM) and by default (the
#      tiles GEMV from 2), each TPOT with its ratio to its own batch 1 (which the variable
#      leaves alone) and the paths it took;
#   4. build the gpu tests and run the tiles GEMV's (TilesTest, Tiles, TilesLayout,
#      EngineBatchTiles, the EngineBatch cases in groups of 128) with the time left.
# Out (6 files): build.log, tiles.jsonl, tiles.err, steps.tar.gz, gpu-build.log, gpu.txt.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/tiles-gemv-2026-12-04/out2}
mkdir -p "$out/steps"
unset DECODEBENCH_INT4_TILES
left() { echo $((590 - $(date +%s) + T0)); }  # seconds of the call's 600 left, with a margin

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 300 cmake --build $b -j16 --target decodebench decodebench_tiles_gemv_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built

# 2. The bench. The kill (README.md): one 8b layer at 2 sequences above 1.25x the rows GEMV at 1.
timeout 150 $b/decodebench_tiles_gemv_bench >"$out/tiles.jsonl" 2>"$out/tiles.err"
echo "bench rc $?"; head -5 "$out/tiles.err"
grep -E '"checks"|"bad": [1-9]' "$out/tiles.jsonl" | head
python3 - "$out/tiles.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"kernel"')]
base = next((r["us_layer"] for r in rows if r["kernel"] == "rows_gemv"), None)
best, default = {}, {}
for r in rows:
    if r["kernel"] == "tiles" and (r["batch"] not in best or r["us_layer"] < best[r["batch"]]["us_layer"]):
        best[r["batch"]] = r
    if r["kernel"] == "tiles_default":
        default[r["batch"]] = r
if base:
    print(f"rows GEMV at 1: {base:.2f} us a layer")
for b, r in sorted(best.items()):
    line = f"tiles B={b:2d} best {r['shape']}: {r['us_layer']:.2f} us"
    if base:
        line += f", {r['us_layer'] / base:.2f}x the rows GEMV at 1"
    line += f", {r['gbps']} GB/s"
    d = default.get(b)
    if d:
        line += f"; default {d['us_layer']:.2f} us ({d['shape']}) {d['us_matrices']}"
    print(line)
PY
t bench

# 3. The step, today's paths then the tiles GEMV.
step() {  # step NAME BATCHES [VAR=VALUE]
  local name=$1 batches=$2
  shift 2
  env "$@" timeout 110 $b/decodebench sweep --model 8b-int4 --graph on --batch "$batches" --tokens 32 --repeat 1 \
    -o "$out/steps/$name.jsonl" >"$out/steps/$name.txt" 2>&1
  echo "step $name rc $?"; grep -iE "error|fail" "$out/steps/$name.txt" | head -3
}
step off 1,2,8,16 DECODEBENCH_INT4_TILES=off
step tiles 1,2,8,16
t step
python3 - "$out/steps/off.jsonl" "$out/steps/tiles.jsonl" <<'PY'
import json, sys
base = None
for f, name in zip(sys.argv[1:], ["off", "tiles"]):
    try:
        rows = [json.loads(l) for l in open(f) if l.strip()]
    except OSError:
        print(name, "no results"); continue
    for r in rows:
        c = r["config"]; B = c.get("batch", 1); v = r["timing"]["tpot_ms"]["median"]
        base = v if B == 1 else base
        paths = sorted({p.split(": ")[1] for p in c.get("batched_paths", [])})
        ratio = f"{v / base:.3f}x batch 1" if base else ""
        print(f"8b-int4 {name:5s} B={B:2d} TPOT {v:.3f} ms {ratio} {','.join(paths)}")
PY
tar -C "$out" -czf "$out/steps.tar.gz" steps && rm -rf "$out/steps"

# 4. The gpu tests, last, with the time left.
timeout $(( $(left) > 30 ? $(left) - 20 : 10 )) cmake --build $b -j16 --target decodebench_gpu_tests \
  >"$out/gpu-build.log" 2>&1 || { echo "gpu tests not built"; tail -3 "$out/gpu-build.log"; exit 0; }
t "gpu tests built"
timeout $(( $(left) > 15 ? $(left) - 5 : 5 )) $b/decodebench_gpu_tests \
  --gtest_filter='Shapes/TilesTest.*:Tiles.*:TilesLayout.*:EngineBatchTiles.*:Kernels/EngineBatch.*_g128' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "FAILED|tests ran|PASSED|Failure" "$out/gpu.txt" | head -20; t gpu
