#!/usr/bin/env bash
# Two device calls on one tree, queue3 (main + mixed-land + int8-land + tiles-ahead), `run` with
# carry [".debs"]: bash results/lab/queue-2026-12-05/run.sh benches, then ... tests. Each part
# ends inside 600 s; everything lands in $OUT as summary.txt and one tar.gz.
#   benches: the build (DEV, sm_90: decodebench, the flash, mixed and tiles benches, the gpu
#     tests); the wgmma prefill attention's checks and timing (flash bench), 8b-int4 prefilling
#     131000 tokens (wgmma); the mixed-input GEMM's checks and one 8b layer at 8-512 sequences;
#     the tiles bench (int4, every shape and D) and with --int8.
#   tests: the gpu tests of the merged paths (tiles int4/int8, EngineBatch*, mixed GEMM, the
#     prefill), then the steps: 8b-int4 / 8b-int8 at 256 sequences (mixed GEMM and the fp16
#     copy), 8b-fp16 at 256, 8b-int8 at 1, 2, 8, 16 with its tiles on and off.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
part=${1:-benches}
out=${OUT:-results/lab/queue-2026-12-05/out}
raw=$out/raw-$part
mkdir -p "$raw"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_BATCHED_GEMM DECODEBENCH_PREFILL_ATTENTION
left() { echo $((585 - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary-$part.txt") 2>&1

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 300 cmake --build $b -j16 --target decodebench decodebench_flash_wgmma_bench decodebench_mixed_wgmma_bench \
    decodebench_tiles_gemv_bench decodebench_gpu_tests; } >"$raw/build.log" 2>&1 ||
  { grep -E "error" "$raw/build.log" | head -30; tail -5 "$raw/build.log"; tar -C "$out" -czf "$out/$part.tar.gz" "raw-$part"; exit 1; }
git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv,noheader
t built

if [ "$part" = benches ]; then
  timeout $(cap 120) $b/decodebench_flash_wgmma_bench --check >"$raw/flash-check.jsonl" 2>"$raw/flash-check.err"
  rc=$?; echo "flash check rc $rc (124: a hang)"; grep -E '"result": "FAIL"' "$raw/flash-check.jsonl" | head -3
  grep -c '"result": "PASS"' "$raw/flash-check.jsonl"; t flash-check
  if [ $rc -ne 124 ]; then
    timeout $(cap 120) $b/decodebench_flash_wgmma_bench --time >"$raw/flash-time.jsonl" 2>"$raw/flash-time.err"
    echo "flash time rc $?"
    python3 - "$raw/flash-time.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        if "kernel" in r:
            print(f'{r["kernel"]:32s} {r["shape"]:15s} T={r["t"]:6d} {r["median_ms"]:9.3f} ms {r["tflops"]:6.1f} TFLOP/s')
PY
    t flash-time
    timeout $(cap 100) $b/decodebench --model 8b-int4 --graph on --context 131000 --tokens 16 --repeat 1 \
      -o "$raw/ctx131000.json" >"$raw/ctx131000.txt" 2>&1
    echo "prefill 131000 rc $?"; grep -iE "prefill|error" "$raw/ctx131000.txt" | head -3; t prefill
  fi
  timeout $(cap 150) $b/decodebench_mixed_wgmma_bench >"$raw/mixed.jsonl" 2>"$raw/mixed.err"
  echo "mixed bench rc $?"; head -3 "$raw/mixed.err"; grep -E '"checks"' "$raw/mixed.jsonl"
  grep -E '"result": "FAIL"' "$raw/mixed.jsonl" | head -3
  python3 - "$raw/mixed.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"kernel"' in l]
by = {(r["kernel"], r["scheme"], r["batch"]): r for r in rows}
for b in sorted({r["batch"] for r in rows}):
    f = by.get(("cublas_fp16", "fp16", b))
    line = [f"B={b:3d} cublas_fp16 {f['us_layer']:8.2f}" if f else f"B={b:3d}"]
    for k, s in [("mixed_wgmma", "int4_g128_zp"), ("dequant_cublas", "int4_g128_zp"), ("mixed_wgmma", "int8")]:
        r = by.get((k, s, b))
        if r:
            line.append(f"{k}/{s} {r['us_layer']:8.2f}" + (f" {r['us_layer'] / f['us_layer']:.2f}x" if f else ""))
    print(" | ".join(line))
PY
  t mixed
  for s in int4 int8; do
    flag=; [ $s = int8 ] && flag=--int8
    timeout $(cap 90) $b/decodebench_tiles_gemv_bench $flag >"$raw/tiles-$s.jsonl" 2>"$raw/tiles-$s.err"
    echo "tiles $s rc $?"; grep -E '"checks"|"bad": [1-9]' "$raw/tiles-$s.jsonl" | head -3
    python3 - "$raw/tiles-$s.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"kernel"')]
base = next((r for r in rows if r["kernel"] == "rows_gemv"), None)
if base:
    print(f"rows GEMV at 1: {base['us_layer']:.2f} us {base['us_matrices']}")
for b in (1, 2, 8, 16):
    here = [r for r in rows if r["batch"] == b and r["kernel"] in ("tiles", "tiles_default")]
    if not here:
        continue
    d = next((r for r in here if r["kernel"] == "tiles_default"), None)
    n = len(here[0]["us_matrices"])
    best = [min(here, key=lambda r: r["us_matrices"][i]) for i in range(n)]
    bsum = sum(r["us_matrices"][i] for i, r in enumerate(best))
    print(f"B={b:2d} default {d['us_layer']:.2f} us {d['us_matrices']} | best a matrix {bsum:.2f} us:",
          ", ".join(f"{r['shape']} {r['us_matrices'][i]:.2f}" for i, r in enumerate(best)))
PY
  done
  t tiles
else
  timeout $(cap 260) $b/decodebench_gpu_tests --gtest_filter='Shapes/TilesTest.*:Tiles.*:TilesLayout.*:Shapes/Int8TilesTest.*:Int8Tiles*:EngineBatch*:Shapes/MixedGemmTest.*:MixedGemm.*:Chunks/PrefillAttentionWgmma.*:Kernels/PrefillVsSteps.*:Prefill.*' \
    >"$raw/gpu.txt" 2>&1
  echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$raw/gpu.txt" | head -20; t gpu
  step() {  # NAME MODEL BATCHES [VAR=VALUE...]
    local name=$1 model=$2 batches=$3
    shift 3
    env "$@" timeout $(cap 80) $b/decodebench sweep --model $model --graph on --batch "$batches" --tokens 16 \
      --repeat 1 -o "$raw/$name.jsonl" >"$raw/$name.txt" 2>&1
    echo "step $name rc $?"; grep -iE "error|fail" "$raw/$name.txt" | head -2
  }
  step int4-256-mixed 8b-int4 256
  step int4-256-copy 8b-int4 256 DECODEBENCH_BATCHED_GEMM=fp16-copy
  step int8-256-mixed 8b-int8 256
  step fp16-256 8b-fp16 256
  step int8-tiles 8b-int8 1,2,8,16
  step int8-off 8b-int8 1,2,8,16 DECODEBENCH_INT8_TILES=off
  t steps
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
        print(f"{os.path.basename(f)[:-6]:16s} B={B:3d} TPOT {v:.3f} ms{rel} {','.join(paths)}")
PY
fi
tar -C "$out" -czf "$out/$part.tar.gz" "raw-$part" && rm -rf "$raw"
