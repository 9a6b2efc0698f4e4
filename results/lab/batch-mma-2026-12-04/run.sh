#!/usr/bin/env bash
# The tensor-core GEMV at 2 to 16 sequences (kernels/gemv_mma.cu), on the H200. It ran on the
# tree of 3a966ac's patch (batch.md §26); that kernel is not in main, so this is the record:
#   bash results/lab/batch-mma-2026-12-04/run.sh a   # build, its gpu tests, the linears' bench
#   bash results/lab/batch-mma-2026-12-04/run.sh b   # at once after: the step at 1-16 sequences
# Design: the fast GEMV's 16-byte weight loads unchanged (int4 nibbles, int8, fp8, fp16), 8 rows
# the mma's N and up to 16 sequences its M, so each weight is loaded and dequantized once and
# multiplied by every sequence by the tensor cores; x re-read through L1 for every 4 blocks of 8
# rows (results/lab/batch.md §26).
# Predicted (before running): one 8b-int4 layer (skinny bench) at 2 to 8 sequences within
# 1.10x of the rows GEMV at 1 (40.5 us -> <= 45 us), at 16 within 1.3x; the step 8b-int4
# B = 2 / 8 / 16 at <= 1.10 / 1.25 / 1.40x of B = 1 (1.647 ms), int8 the same.
# Kill criterion: B = 2 on one 8b-int4 layer above 1.25x the rows GEMV at B = 1 after two
# device calls (tuning included): stop and write down why.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/batch-mma-2026-12-04/out}
mkdir -p "$out/runs"
case "${1:?usage: run.sh a|b}" in
  a)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_skinny_bench; } \
      >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
    t built
    timeout 150 $b/decodebench_gpu_tests --gtest_filter='Mma/*:Mma.*:Shapes/ColumnsTest.*:Columns.*' \
      >"$out/gpu-mma.txt" 2>&1
    echo "gpu rc $?"; grep -E "FAILED|tests ran|PASSED|Failure|got " "$out/gpu-mma.txt" | head -20; t gpu
    for s in int4 int8 fp16; do
      timeout 60 $b/decodebench_skinny_bench --tune-mma --batches 1,2,8,16 --$s >"$out/bench-$s.txt" 2>&1
      grep -E "^$s +(1 +gemv|[0-9]+ +(mma|s[48]w[0-9]+b[0-9]) )" "$out/bench-$s.txt" | sort -k2,2n -k4,4n | \
        awk '{k=$1" "$2; if (n[k]++ < 4 || $3=="mma" || $3=="gemv") print}' | cut -c1-110
    done
    t bench
    ;&
  b)
    timeout 200 $b/decodebench sweep --model 8b-int4,8b-int8,8b-fp16 --graph on \
      --batch 1,2,8,16 --tokens 64 --warmup 16 --repeat 3 -o "$out/runs/sweep.jsonl" >"$out/sweep.txt" 2>&1
    echo "sweep rc $?"; tail -3 "$out/sweep.txt"; t sweep
    python3 - "$out/runs/sweep.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = {}
for r in rows:
    c = r["config"]; m = c.get("model"); B = c.get("batch", 1); t = r["timing"]["tpot_ms"]["median"]
    if B == 1: base[m] = t
    print(m, B, round(t, 3), f"{t / base[m]:.3f}x" if m in base else "")
PY
    timeout 90 $b/decodebench_gpu_tests --gtest_filter='Kernels/EngineBatch.*' >"$out/gpu-engine.txt" 2>&1
    echo "engine gpu rc $?"; grep -E "FAILED|tests ran|PASSED" "$out/gpu-engine.txt" | head -10; t engine
    ;;
esac
