#!/usr/bin/env bash
# The landing run of land5 (main + fp16-tiles + mixed-mid + the tests' shared helpers), one call
# of `run` with carry [".debs"]: build, the gpu tests of what it changes, then the step's A/B
# (each change against its switch) and the batches README quotes. Everything is written into
# $OUT as it comes, so that a call cut short still returns what ran.
#   bash results/lab/land-2026-12-05b/run.sh          # the landing call (tests, then the A/B)
#   bash results/lab/land-2026-12-05b/run.sh readme   # then: README's batch sweep, batch 1 against
#                                                     # the committed matrix (compare --threshold 1%)
set -uo pipefail
mode=${1:-land}
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/land-2026-12-05b/out}
mkdir -p "$out"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_FP16_TILES DECODEBENCH_MIXED_GEMM
left() { echo $((${LAND_SECONDS:-470} - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary.txt") 2>&1
git log --oneline -1 2>/dev/null
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout $(cap 300) cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t built
if [ "$mode" = readme ]; then
  timeout $(cap 430) $b/decodebench sweep --model 8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int8,1b-int4 --graph on \
    --batch 1-256*2 --tokens 64 --warmup 16 --repeat 3 -o "$out/batch-sweep.jsonl" >"$out/sweep.log" 2>&1
  echo "sweep rc $?"; tail -2 "$out/sweep.log"; t sweep
  $b/decodebench report results/h200/{8b,1b}-{fp16,int8,int4}-graph-on.json --format jsonl >"$out/base.jsonl"
  python3 -c "import json,sys; [print(l, end='') for l in open(sys.argv[1]) if l.strip() and json.loads(l)['config'].get('batch', 1) == 1]" \
    "$out/batch-sweep.jsonl" >"$out/b1.jsonl"
  $b/decodebench compare "$out/base.jsonl" "$out/b1.jsonl" --threshold 1% >"$out/b1-compare.md" 2>&1
  echo "compare exit $?: $(grep -E ' matched: ' "$out/b1-compare.md")"
  exit 0
fi
timeout $(cap ${LAND_TEST_SECONDS:-160}) $b/decodebench_gpu_tests --gtest_filter='Shapes/Fp16TilesTest.*:Fp16Tiles*:Shapes/MixedGemmTest.*:MixedGemm*:Shapes/TilesTest.*:Tiles*:Shapes/Int8TilesTest.*:Int8Tiles*:*Skinny*:EngineBatch*:Kernels/EngineBatch.*:Kernels/PrefillVsSteps.*:Prefill*:*Golden*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$out/gpu.txt" | head -20
t tests
sweep() {  # NAME ENV-ASSIGNMENT|- DECODEBENCH-SWEEP-ARGS...
  local name=$1 envset=$2; shift 2
  if [ "$envset" = - ]; then envset=DECODEBENCH_UNUSED=1; fi
  env "$envset" timeout $(cap 90) $b/decodebench sweep --graph on --tokens 32 --repeat 2 "$@" \
    -o "$out/$name.jsonl" >"$out/$name.log" 2>&1
  echo "sweep $name rc $?"; grep -iE "error" "$out/$name.log" | head -2
}
sweep fp16 - --model 8b-fp16 --batch 1,2,4,8,16
sweep fp16-off DECODEBENCH_FP16_TILES=off --model 8b-fp16 --batch 2,4,8,16
sweep int4 - --model 8b-int4 --batch 1,2,8,16
sweep 1b-int4 - --model 1b-int4 --batch 1,2,8,16
sweep int8 - --model 8b-int8 --batch 1,2,8,16
sweep mid - --model 8b-int4,8b-int8,8b-fp16 --batch 32,64,128
t sweeps
python3 - "$out" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.jsonl")):
    for l in open(f):
        if not l.strip():
            continue
        r = json.loads(l); c = r["config"]
        paths = sorted({p.split(": ", 1)[1] for p in c.get("batched_paths", []) if " [" in p})
        print(f"{os.path.basename(f)[:-6]:9s} {str(c.get('model', '?')):8s} B={c.get('batch', 1):3d} "
              f"TPOT {r['timing']['tpot_ms']['median']:.3f} ms {','.join(paths)}")
PY
