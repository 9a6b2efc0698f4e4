#!/usr/bin/env bash
# One device call (bash results/lab/tiles-gemv-2026-12-04/run.sh): the tiles GEMV's first run
# (README.md here). Its checks against the CPU (exit 1 on a failure), then one 8b layer at
# 1-16 sequences beside the rows GEMV at 1, then today's paths (columns GEMV, skinny GEMM) on
# the same lease; ~4 minutes with the build.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/tiles-gemv-2026-12-04/out}
mkdir -p "$out"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench_tiles_gemv_bench decodebench_skinny_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
timeout 240 $b/decodebench_tiles_gemv_bench >"$out/tiles.jsonl" 2>"$out/tiles.err"
echo "bench rc $?"; head -5 "$out/tiles.err"
grep -E '"checks"|"bad": [1-9]' "$out/tiles.jsonl" | head
grep -E '"kernel"' "$out/tiles.jsonl" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
base = next(r["us_layer"] for r in rows if r["kernel"] == "rows_gemv")
best = {}
for r in rows:
    if r["kernel"] == "tiles" and (r["batch"] not in best or r["us_layer"] < best[r["batch"]]["us_layer"]):
        best[r["batch"]] = r
print(f"rows GEMV at 1: {base:.2f} us a layer")
for b, r in sorted(best.items()):
    print(f"tiles B={b:2d} best {r[\"shape\"]}: {r[\"us_layer\"]:.2f} us, {r[\"us_layer\"] / base:.2f}x the rows GEMV at 1, {r[\"gbps\"]} GB/s")
'
t bench
# Today's paths on the same lease: the columns GEMV at 2-8 and the skinny GEMM at every batch.
timeout 120 $b/decodebench_skinny_bench --int4 >"$out/skinny-int4.txt" 2>&1
grep -E "^int4 +([0-9]+) +(gemv|skinny|columns) " "$out/skinny-int4.txt" | awk '$2 <= 16' | cut -c1-60
t skinny
