#!/usr/bin/env bash
# Two device calls on the mixed-mid tree (main + the mixed-input GEMM at 17 to 128 sequences),
# `run` with carry [".debs"], on one warm machine, in this order:
#   bash results/lab/mixed-mid-2026-12-05/run.sh tests
#   bash results/lab/mixed-mid-2026-12-05/run.sh steps
# tests (~300-450 s): the build (DEV, sm_90: decodebench, decodebench_gpu_tests,
#   decodebench_mixed_wgmma_bench), the bench's checks against the CPU (--check-only), then the
#   gpu tests of the mixed GEMM and every EngineBatch* test under `timeout 300`.
# steps (~150-250 s; the build is kept from `tests`, else it is made again): 8b-int4 and
#   8b-int8 at 16, 17, 32, 64, 65, 128 sequences with DECODEBENCH_MIXED_GEMM=off and on, and
#   8b-fp16 at the same batches (graph on, 16 tokens, 1 repeat); TPOT a row. batch.md §37's
#   prediction and kill are decided on these rows.
# Out ($OUT): summary-<part>.txt and <part>.tar.gz (the logs and result files), 4 files in all.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
part=${1:-tests}
out=${OUT:-results/lab/mixed-mid-2026-12-05/out}
raw=$out/raw-$part
mkdir -p "$raw"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_MIXED_GEMM \
  DECODEBENCH_PREFILL_ATTENTION
left() { echo $((585 - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary-$part.txt") 2>&1
finish() { tar -C "$out" -czf "$out/$part.tar.gz" "raw-$part" && rm -rf "$raw"; }

{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 330 cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_mixed_wgmma_bench; } \
  >"$raw/build.log" 2>&1 ||
  { grep -E "error" "$raw/build.log" | head -30; tail -5 "$raw/build.log"; finish; exit 1; }
git rev-parse HEAD 2>/dev/null; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit --format=csv,noheader
t built

if [ "$part" = tests ]; then
  timeout $(cap 60) $b/decodebench_mixed_wgmma_bench --check-only >"$raw/mixed-check.jsonl" 2>"$raw/mixed-check.err"
  echo "mixed bench check rc $? (124: a hang)"; head -3 "$raw/mixed-check.err"
  grep -E '"checks"' "$raw/mixed-check.jsonl"; grep -E '"result": "FAIL"' "$raw/mixed-check.jsonl" | head -3
  t mixed-check
  timeout $(cap 300) $b/decodebench_gpu_tests \
    --gtest_filter='Shapes/MixedGemmTest.*:MixedGemm.*:EngineBatch*:Kernels/EngineBatch.*' >"$raw/gpu.txt" 2>&1
  echo "gpu rc $? (124: past 300 s)"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$raw/gpu.txt" | head -20
  grep -B2 -A12 "Failure" "$raw/gpu.txt" | head -60
  t gpu
else
  step() {  # NAME MODELS [VAR=VALUE...]
    local name=$1 models=$2
    shift 2
    env "$@" timeout $(cap 150) $b/decodebench sweep --model "$models" --graph on --batch 16,17,32,64,65,128 \
      --tokens 16 --repeat 1 -o "$raw/$name.jsonl" >"$raw/$name.txt" 2>&1
    echo "step $name rc $?"; grep -iE "error|fail" "$raw/$name.txt" | head -2
    t "$name"
  }
  step mixed-on 8b-int4,8b-int8 DECODEBENCH_MIXED_GEMM=on
  step mixed-off 8b-int4,8b-int8 DECODEBENCH_MIXED_GEMM=off
  step fp16 8b-fp16
  python3 - "$raw" <<'PY'
import json, sys, glob, os
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    setting = os.path.basename(f)[:-6]
    for l in open(f):
        if l.strip():
            r = json.loads(l); c = r["config"]
            paths = sorted({p.split(": ")[1] for p in c.get("batched_paths", [])})
            rows[(c["model"], setting, c.get("batch", 1))] = (r["timing"]["tpot_ms"]["median"], ",".join(paths))
for (m, s, B), (v, p) in sorted(rows.items()):
    fp16 = rows.get(("8b-fp16", "fp16", B))
    rel = f" {v / fp16[0]:.3f}x 8b-fp16" if fp16 and m != "8b-fp16" else ""
    print(f"{m:8s} {s:9s} B={B:3d} TPOT {v:.3f} ms{rel} {p}")
for m in ("8b-int4", "8b-int8"):
    on, off = rows.get((m, "mixed-on", 64)), rows.get((m, "mixed-off", 64))
    if on and off:
        print(f"kill ({m} at 64, mixed GEMM not faster than the skinny GEMM): on {on[0]:.3f} ms, off {off[0]:.3f} ms"
              f" -> {'MET (kill)' if on[0] >= off[0] else 'not met'}")
PY
fi
finish
