#!/usr/bin/env bash
# One call of `run` (kind nvidia-h200, carry [".debs"], ~330 s on an H200) on the landed tree
# plus the tuners' second timing of the default (tune-warm2): README's batch sweep on the H200
# (the batch table and the bars of the batch issue are the H200's), fp16 at 2 sequences
# against DECODEBENCH_FP16_TILES=off (which moves the quantized models' fp16 lm_head to the
# columns GEMV too), then batch 1 as the committed matrix ran it (128 tokens, 5 repeats)
# against results/h200 at 1%, after the gpu tests of the timed shapes and the engine's batches.
# At most 8 files come back: everything goes to $OUT as it comes.
#   bash results/lab/batch-h200-2026-12-05/run.sh [PARTS]
# PARTS, a comma list (default tests,ab,b1,sweep): `tests` the gpu tests, `ab` fp16 at 2 (the
# default, then the switch off), `b1` batch 1 against the matrix, `sweep` README's sweep
# (~270 s): two calls on one warm machine, the second reusing the first's build.
# RUN_SECONDS (500) bounds the whole call; SWEEP_MODELS, SWEEP_BATCHES and OFF_MODELS narrow the sweeps.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/batch-h200-2026-12-05/out}
mkdir -p "$out"
unset DECODEBENCH_TILES DECODEBENCH_INT4_TILES DECODEBENCH_INT8_TILES DECODEBENCH_FP16_TILES DECODEBENCH_MIXED_GEMM
left() { echo $((${RUN_SECONDS:-500} - $(date +%s) + T0)); }
cap() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $((l > 5 ? l - 5 : 1)); }
exec > >(tee "$out/summary.txt") 2>&1
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout $(cap 240) cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } \
  >/tmp/build.log 2>&1 || { grep -E "error" /tmp/build.log | head -30; tail -5 /tmp/build.log; exit 1; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t built
run_sweep() {  # NAME SECONDS ENV-ASSIGNMENT|- DECODEBENCH-SWEEP-ARGS...
  local name=$1 secs=$2 envset=$3; shift 3
  if [ "$envset" = - ]; then envset=DECODEBENCH_UNUSED=1; fi
  env "$envset" timeout $(cap "$secs") $b/decodebench sweep --graph on "$@" \
    -o "$out/$name.jsonl" >"/tmp/$name.log" 2>&1
  echo "sweep $name rc $?"; grep -iE "error|throttled" "/tmp/$name.log" | head -4
}
parts=,${1:-tests,ab,b1,sweep},
has() { [[ $parts == *,$1,* ]]; }
if has tests; then
# The gpu tests of what the tuners' two rounds touch: the timed shapes and every engine batch.
timeout $(cap 90) $b/decodebench_gpu_tests --gtest_brief=1 \
  --gtest_filter='Tiles.*:Fp16Tiles.*:Int8Tiles.*:Skinny.*:EngineBatch*:Kernels/EngineBatch.*' \
  >"$out/gpu.txt" 2>&1
echo "gpu rc $?"; grep -E "^\[  FAILED|tests ran|PASSED|SKIPPED \]" "$out/gpu.txt" | head -20
t tests
fi
if has ab; then
run_sweep fp16-on 60 - --model ${OFF_MODELS:-8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int4} \
  --batch 2 --tokens 32 --warmup 8 --repeat 2
run_sweep fp16-off 60 DECODEBENCH_FP16_TILES=off --model ${OFF_MODELS:-8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int4} \
  --batch 2 --tokens 32 --warmup 8 --repeat 2
t fp16-off
fi
if has b1; then
run_sweep b1 80 - --model 8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int8,1b-int4 --tokens 128 --warmup 16 --repeat 5
$b/decodebench report results/h200/{8b,1b}-{fp16,int8,int4}-graph-on.json --format jsonl >/tmp/base.jsonl
$b/decodebench compare /tmp/base.jsonl "$out/b1.jsonl" --threshold 1% >"$out/b1-compare.md" 2>&1
echo "compare exit $?: $(grep -E ' matched: ' "$out/b1-compare.md")"
t compare
fi
if has sweep; then
run_sweep batch-sweep ${SWEEP_SECONDS:-400} - --model ${SWEEP_MODELS:-8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int8,1b-int4} \
  --batch ${SWEEP_BATCHES:-1-256*2} --tokens 32 --warmup 8 --repeat 2
t sweep
fi
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
        for k in c.get("kernel_shapes", []) if m == "1b-int4" and B == 2 else []:
            print("   ", k)
PY
t done
