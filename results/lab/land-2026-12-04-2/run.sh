#!/usr/bin/env bash
# One device call for two changes (bash results/lab/land-2026-12-04-2/run.sh), both killed and
# in git history only (3a966ac's patches; batch.md §26, attention.md §22):
# 1. kernels/gemv_mma.cu without 64-bit divisions in its loop (the run of batch-mma-2026-12-04
#    spent its time there: fp16, with the most items, was slowest); its shapes tuned in the
#    bench, the step at the best one (DECODEBENCH_MMA_SHAPE, DEV builds).
#    Predicted: an 8b-int4 layer at 2 sequences ~45 us (rows GEMV at 1: 40.5), the step 8b-int4
#    B = 2 ~1.8 ms (1.10x); kill: B = 2 above 1.25x batch 1 on the layer (batch.md §26).
# 2. The flattened attention grid (attention.md §22). Predicted: 8b-int4 --context 32768
#    2.792 -> ~2.77 ms, 131000 5.983 -> ~5.87, fp8 131000 4.177 -> ~4.10; kill: us_train at
#    32768 not below the per-head grid's.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/land-2026-12-04-2/out}
mkdir -p "$out/runs"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_skinny_bench decodebench_attention_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
timeout 45 $b/decodebench_gpu_tests --gtest_filter='*AttentionMma*lat*:AttentionMmaFlat.*:AttentionLongCache.*:Mma.*' \
  >"$out/gpu-flat.txt" 2>&1
echo "gpu rc $?"; grep -E "FAILED|tests ran|PASSED|Failure" "$out/gpu-flat.txt" | head -12; t gpu
best=""
for s in int4 int8 fp16; do
  timeout 40 $b/decodebench_skinny_bench --tune-mma --batches 1,2,16 --$s >"$out/bench-$s.txt" 2>&1
  grep -E "^$s +(1 +gemv|[0-9]+ +(mma|s[48]w[0-9]+b[0-9]) )" "$out/bench-$s.txt" | sort -k2,2n -k4,4n | \
    awk '{k=$1" "$2; if (n[k]++ < 3 || $3=="mma" || $3=="gemv") print}' | cut -c1-100
  # the best shape at 2 sequences, as steps,warps
  sh=$(grep -E "^$s +2 +s[48]w[0-9]+b0 " "$out/bench-$s.txt" | sort -k4,4n | head -1 | awk '{print $3}' | sed -E 's/s([0-9]+)w([0-9]+)b0/\1,\2/')
  best="$best $s=$sh"
done
echo "best at 2:$best"; t bench
for s in int4 int8 fp16; do
  sh=$(echo "$best" | tr ' ' '\n' | grep "^$s=" | cut -d= -f2)
  DECODEBENCH_MMA_SHAPE=$sh timeout 60 $b/decodebench sweep --model 8b-$s --graph on --batch 1,2,8,16 --tokens 32 \
    --warmup 8 --repeat 2 -o "$out/runs/sweep-$s.jsonl" >"$out/sweep-$s.txt" 2>&1 || echo "sweep $s failed"
done
t sweep
python3 - "$out"/runs/sweep-*.jsonl <<'PY'
import json, sys
for f in sys.argv[1:]:
    base = None
    for l in open(f):
        if not l.strip(): continue
        r = json.loads(l); c = r["config"]; B = c.get("batch", 1); v = r["timing"]["tpot_ms"]["median"]
        base = v if B == 1 else base
        print(c.get("model"), B, round(v, 3), f"{v / base:.3f}x")
PY
timeout 40 $b/decodebench_attention_bench --only 8b --positions 8192,32768,131000 --kv fp16 >"$out/attn-fp16.jsonl" 2>&1
timeout 40 $b/decodebench_attention_bench --only 8b --positions 32768,131000 --kv fp8 >"$out/attn-fp8.jsonl" 2>&1
grep -h attention_mma "$out"/attn-*.jsonl | cut -c1-200; t attn
for run in "fp16 32768" "fp8 32768" "fp8 131000"; do
  set -- $run; kv=$1; ctx=$2
  timeout 70 $b/decodebench --model 8b-int4 --graph on --context $ctx --kv-cache $kv --tokens 32 --repeat 2 \
    -o "$out/runs/8b-int4-ctx$ctx-$kv.json" 2>&1 | grep -E "TPOT|prefill |rror" | grep -v " on cuda: " | sed "s/^/ctx $ctx $kv: /"
done
t ctx
tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$out/runs"
