#!/usr/bin/env bash
# The landing run of land5 + the tuners' warm-up (tune-warm), everything in one call of `run`
# with carry [".debs"] (~500 s on an H200; device starts are scarce, so no second call is
# assumed): build, the gpu tests of what it changes, 8b-fp16 at 2-8 sequences against
# DECODEBENCH_FP16_TILES=off (the decision for fp16 at 2), then README's batch sweep (six
# models, 1-256*2) and its batch-1 runs against the committed matrix (compare --threshold 1%).
# Everything is written into $OUT as it comes, so a call cut short still returns what ran.
#   bash results/lab/land-2026-12-05c/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/land-2026-12-05c/out}
mkdir -p "$out"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_FP16_TILES DECODEBENCH_MIXED_GEMM
left() { echo $((${LAND_SECONDS:-580} - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary.txt") 2>&1
git log --oneline -1 2>/dev/null
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout $(cap 200) cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t built
timeout $(cap ${LAND_TEST_SECONDS:-150}) $b/decodebench_gpu_tests --gtest_brief=1 \
  --gtest_filter='Shapes/Fp16TilesTest.*:Fp16Tiles*:Shapes/MixedGemmTest.*:MixedGemm*:Shapes/TilesTest.*:Tiles*:Shapes/Int8TilesTest.*:Int8Tiles*:*Skinny*:EngineBatch*:Kernels/EngineBatch.*:Kernels/PrefillVsSteps.*:Prefill*:*Golden*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$out/gpu.txt" | head -20
t tests
run_sweep() {  # NAME SECONDS ENV-ASSIGNMENT|- DECODEBENCH-SWEEP-ARGS...
  local name=$1 secs=$2 envset=$3; shift 3
  if [ "$envset" = - ]; then envset=DECODEBENCH_UNUSED=1; fi
  env "$envset" timeout $(cap "$secs") $b/decodebench sweep --graph on "$@" \
    -o "$out/$name.jsonl" >"$out/$name.log" 2>&1
  echo "sweep $name rc $?"; grep -iE "error" "$out/$name.log" | head -2
}
run_sweep fp16-ab 60 - --model 8b-fp16 --batch 1,2,4,8 --tokens 32 --repeat 2
run_sweep fp16-off 50 DECODEBENCH_FP16_TILES=off --model 8b-fp16 --batch 2,4,8 --tokens 32 --repeat 2
t fp16
run_sweep batch-sweep 400 - --model 8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int8,1b-int4 \
  --batch 1-256*2 --tokens 32 --warmup 8 --repeat 2
t sweep
$b/decodebench report results/h200/{8b,1b}-{fp16,int8,int4}-graph-on.json --format jsonl >/tmp/base.jsonl
python3 -c "import json,sys; [print(l, end='') for l in open(sys.argv[1]) if l.strip() and json.loads(l)['config'].get('batch', 1) == 1]" \
  "$out/batch-sweep.jsonl" >/tmp/b1.jsonl
$b/decodebench compare /tmp/base.jsonl /tmp/b1.jsonl --threshold 1% >"$out/b1-compare.md" 2>&1
echo "compare exit $?: $(grep -E ' matched: ' "$out/b1-compare.md")"
python3 - "$out" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    b1 = {}
    for l in open(f):
        if not l.strip():
            continue
        r = json.loads(l); c = r["config"]; m = c.get("model", "?"); B = c.get("batch", 1)
        tpot = r["timing"]["tpot_ms"]["median"]
        if B == 1:
            b1[m] = tpot
        paths = sorted({p.split(": ", 1)[1] for p in c.get("batched_paths", []) if " [" in p})
        x = f"{tpot / b1[m]:.3f}x" if m in b1 else "      "
        print(f"{os.path.basename(f)[:-6]:11s} {m:8s} B={B:3d} TPOT {tpot:7.3f} ms {x} {','.join(paths)}")
PY
t done
