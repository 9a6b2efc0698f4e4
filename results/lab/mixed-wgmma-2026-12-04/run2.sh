#!/usr/bin/env bash
# One device call (bash results/lab/mixed-wgmma-2026-12-04/run2.sh; `run` on one H200 with carry
# [".debs"] where the checkout has one): the mixed-input GEMM as the product runs it
# (kernels/mixed_gemm.cu, BatchedPath::mixed_gemm from 65 sequences on sm_90). In order, each
# under a timeout so that the call ends inside 600 s:
#   1. the build (DEV, CMAKE_CUDA_ARCHITECTURES=90): decodebench, the bench, the gpu tests;
#   2. the bench's checks against the CPU (exit 1 on a failure, a trap on a barrier that waits
#      2 s), then one 8b layer at 8-512 sequences beside cuBLAS fp16 and the fp16 copy path;
#   3. decodebench --batch 256 on 8b-int4 and 8b-int8, each with DECODEBENCH_BATCHED_GEMM=fp16-copy
#      (today's path) and by default (the mixed GEMM), and 8b-fp16: TPOT from the result JSON and
#      the batched paths it records (the bar: int4 <= 10 ms, never slower than fp16);
#   4. the gpu tests of the new path (MixedGemm*, EngineBatchMixed) with what time is left.
# Output under $OUT (default results/lab/mixed-wgmma-2026-12-04/out2).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/mixed-wgmma-2026-12-04/out2}
mkdir -p "$out/runs"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench decodebench_mixed_wgmma_bench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv,noheader >"$out/gpu.txt" 2>&1
git rev-parse HEAD >"$out/commit.txt" 2>/dev/null

timeout 200 $b/decodebench_mixed_wgmma_bench >"$out/mixed.jsonl" 2>"$out/mixed.err"
echo "bench rc $? (124: timeout; 1: a check failed or an error, see mixed.err)"
head -5 "$out/mixed.err"
grep -E '"checks"' "$out/mixed.jsonl"
grep -E '"result": "FAIL"' "$out/mixed.jsonl" | head -5
python3 - "$out/mixed.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"kernel"' in l]
by = {(r["kernel"], r["scheme"], r["batch"]): r for r in rows}
for b in sorted({r["batch"] for r in rows}):
    f = by.get(("cublas_fp16", "fp16", b))
    line = [f"B={b:3d} cublas_fp16 {f['us_layer']:8.2f} us" if f else f"B={b:3d}"]
    for k, s in [("mixed_wgmma", "int4_g128_zp"), ("dequant_cublas", "int4_g128_zp"), ("mixed_wgmma", "int8")]:
        r = by.get((k, s, b))
        if r:
            rel = f" {r['us_layer'] / f['us_layer']:.2f}x" if f else ""
            line.append(f"{k}/{s} {r['us_layer']:8.2f} us{rel}")
    print(" | ".join(line))
PY
t bench

# The step at 256 sequences: today's path and the mixed GEMM side by side, fp16 beside them.
step() {  # name, model, env
  timeout 75 env $3 $b/decodebench --model $2 --graph on --batch 256 --tokens 16 --repeat 1 \
    -o "$out/runs/$1.json" >"$out/runs/$1.txt" 2>"$out/runs/$1.log" || { echo "$1 rc $?"; tail -3 "$out/runs/$1.log"; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r["timing"]["tpot_ms"]["median"]
print("%-16s TPOT %.3f ms |" % (sys.argv[2], t), "; ".join(r["config"].get("batched_paths", [])))' \
    "$out/runs/$1.json" "$1" 2>/dev/null
}
step int4-fp16-copy 8b-int4 DECODEBENCH_BATCHED_GEMM=fp16-copy
step int4-mixed 8b-int4 DECODEBENCH_BATCHED_GEMM=auto
step int8-fp16-copy 8b-int8 DECODEBENCH_BATCHED_GEMM=fp16-copy
step int8-mixed 8b-int8 DECODEBENCH_BATCHED_GEMM=auto
step fp16 8b-fp16 DECODEBENCH_BATCHED_GEMM=auto
t steps

left=$((580 - $(date +%s) + T0))
if [ "$left" -gt 20 ]; then
  timeout "$left" $b/decodebench_gpu_tests --gtest_filter='Shapes/MixedGemmTest.*:MixedGemm.*:EngineBatchMixed.*' \
    >"$out/gpu-mixed.txt" 2>&1
  echo "gpu rc $? (124: out of time, $left s)"
  grep -E "FAILED|tests ran|PASSED|SKIPPED|Failure|got " "$out/gpu-mixed.txt" | head -20
else
  echo "gpu tests: no time left ($left s)"
fi
t done
