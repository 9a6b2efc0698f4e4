#!/usr/bin/env bash
# One device call (bash results/lab/tiles-int8-2026-12-05/land.sh; `run` on one H200 with carry
# [".debs"]): the int8 tiles GEMV rebased onto main without the batched fusion (branch
# int8-land), before it lands. In order, each under a timeout, the call within 600 s:
#   1. build decodebench, the tiles bench and the gpu tests (DEV, sm_90);
#   2. the gpu tests of both schemes' tiles (kernel, layout, engine) and every batched engine case;
#   3. the bench with --int8: its checks, one 8b-int8 layer beside the int8 rows GEMV;
#   4. the step, 8b-int8 at 1, 2, 8, 16 with DECODEBENCH_INT8_TILES=off and by default, and
#      8b-int4 at 1, 2 (its tiles unchanged by the templating).
# Out: build.log, gpu.txt, tiles8.jsonl, steps.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/tiles-int8-2026-12-05/out}
mkdir -p "$out/steps"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES
left() { echo $((590 - $(date +%s) + T0)); }

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 330 cmake --build $b -j16 --target decodebench decodebench_tiles_gemv_bench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
git rev-parse HEAD >"$out/commit.txt" 2>/dev/null
t built

timeout 200 $b/decodebench_gpu_tests \
  --gtest_filter='Shapes/Int8TilesTest.*:Int8Tiles*:Shapes/TilesTest.*:Tiles.*:TilesLayout.*:EngineBatch*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$out/gpu.txt" | head -20; t gpu

timeout 120 $b/decodebench_tiles_gemv_bench --int8 >"$out/tiles8.jsonl" 2>"$out/tiles8.err"
echo "bench rc $?"; head -3 "$out/tiles8.err"
grep -E '"checks"|"bad": [1-9]' "$out/tiles8.jsonl" | head -5
python3 - "$out/tiles8.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"kernel"')]
base = next((r["us_layer"] for r in rows if r["kernel"] == "rows_gemv"), None)
for r in rows:
    if r["kernel"] == "tiles_default":
        rel = f" {r['us_layer'] / base:.2f}x the rows GEMV's {base:.2f}" if base else ""
        print(f"int8 tiles default B={r['batch']:2d} {r['us_layer']:.2f} us{rel} ({r['shape']})")
PY
t bench

step() {  # step NAME MODEL BATCHES [VAR=VALUE]
  local name=$1 model=$2 batches=$3
  shift 3
  env "$@" timeout $(( $(left) > 100 ? 90 : $(left) - 10 )) $b/decodebench sweep --model $model --graph on \
    --batch "$batches" --tokens 32 --repeat 1 -o "$out/steps/$name.jsonl" >"$out/steps/$name.txt" 2>&1
  echo "step $name rc $?"; grep -iE "error|fail" "$out/steps/$name.txt" | head -3
}
step int8-off 8b-int8 1,2,8,16 DECODEBENCH_INT8_TILES=off
step int8-tiles 8b-int8 1,2,8,16
step int4-tiles 8b-int4 1,2,8,16
t steps
python3 - "$out"/steps/int8-off.jsonl "$out"/steps/int8-tiles.jsonl "$out"/steps/int4-tiles.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    base = None
    try:
        rows = [json.loads(l) for l in open(f) if l.strip()]
    except OSError:
        print(f, "no results"); continue
    for r in rows:
        c = r["config"]; B = c.get("batch", 1); v = r["timing"]["tpot_ms"]["median"]
        base = v if B == 1 else base
        paths = sorted({p.split(": ")[1] for p in c.get("batched_paths", [])})
        print(f"{f.split('/')[-1][:-6]:10s} B={B:2d} TPOT {v:.3f} ms {v / base:.3f}x batch 1 {','.join(paths)}")
PY
tar -C "$out" -czf "$out/steps.tar.gz" steps && rm -rf "$out/steps"
