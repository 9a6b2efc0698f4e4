#!/usr/bin/env bash
# One device call (bash results/lab/tiles-gemv-2026-12-04/run3.sh; `run` on one H200 with carry
# [".debs"] where the checkout has one): the tiles GEMV on int8 weights (branch tiles-int8,
# README.md here), in the bench and in the product. In order, each under a timeout, the call
# within 600 s:
#   1. build decodebench, the bench and the gpu tests (DEV, sm_90);
#   2. the gpu tests of the int8 tiles (the kernel, its fused forms and its layout against the
#      CPU; the engine's int8 cases);
#   3. the bench with --int8: its checks, then one 8b-int8 layer at 1-16 sequences beside the
#      int8 rows GEMV at 1, every shape and the default;
#   4. the step: 8b-int8, graph on, --tokens 32 --repeat 1, at 1, 2, 8, 16 with
#      DECODEBENCH_INT8_TILES=off (the columns GEMV and the skinny GEMM) and by default (the
#      tiles GEMV from 2), each TPOT with its ratio to its own batch 1 and the paths it took.
# Out: build.log, gpu.txt, tiles8.jsonl, tiles8.err, steps.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/tiles-gemv-2026-12-04/out3}
mkdir -p "$out/steps"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES
left() { echo $((590 - $(date +%s) + T0)); }  # seconds of the call's 600 left, with a margin

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 330 cmake --build $b -j16 --target decodebench decodebench_tiles_gemv_bench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built

# 2. Correctness first.
timeout 120 $b/decodebench_gpu_tests \
  --gtest_filter='Shapes/Int8TilesTest.*:Int8Tiles.*:Forms/Int8TilesFusedTest.*:Int8TilesLayout.*:EngineBatchTiles.Int8*:Kernels/EngineBatch.*/int8_gemv*:EngineBatchGraph.TheFused*:EngineBatchShapes.*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "FAILED|tests ran|PASSED|Failure" "$out/gpu.txt" | head -20; t gpu

# 3. The bench. The kill (README.md): one 8b-int8 layer at 2 sequences above 1.25x the int8
# rows GEMV at 1.
timeout 150 $b/decodebench_tiles_gemv_bench --int8 >"$out/tiles8.jsonl" 2>"$out/tiles8.err"
echo "bench rc $?"; head -5 "$out/tiles8.err"
grep -E '"checks"|"bad": [1-9]' "$out/tiles8.jsonl" | head
python3 - "$out/tiles8.jsonl" <<'PY'
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
    print(f"int8 rows GEMV at 1: {base:.2f} us a layer")
for b, r in sorted(best.items()):
    line = f"int8 tiles B={b:2d} best {r['shape']}: {r['us_layer']:.2f} us"
    if base:
        line += f", {r['us_layer'] / base:.2f}x the rows GEMV at 1"
    line += f", {r['gbps']} GB/s"
    d = default.get(b)
    if d:
        line += f"; default {d['us_layer']:.2f} us ({d['shape']}) {d['us_matrices']}"
    print(line)
PY
t bench

# 4. The step, today's paths then the tiles GEMV, with the time left.
step() {  # step NAME BATCHES [VAR=VALUE]
  local name=$1 batches=$2
  shift 2
  env "$@" timeout $(( $(left) > 100 ? 90 : $(left) - 10 )) $b/decodebench sweep --model 8b-int8 --graph on \
    --batch "$batches" --tokens 32 --repeat 1 -o "$out/steps/$name.jsonl" >"$out/steps/$name.txt" 2>&1
  echo "step $name rc $?"; grep -iE "error|fail" "$out/steps/$name.txt" | head -3
}
step off 1,2,8,16 DECODEBENCH_INT8_TILES=off
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
        print(f"8b-int8 {name:5s} B={B:2d} TPOT {v:.3f} ms {ratio} {','.join(paths)}")
PY
tar -C "$out" -czf "$out/steps.tar.gz" steps && rm -rf "$out/steps"
