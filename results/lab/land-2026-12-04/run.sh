#!/usr/bin/env bash
# What lands on 2026-12-04 owes the GPU, in two calls on one machine (the build kept warm):
#   bash results/lab/land-2026-12-04/run.sh a   # build, gpu tests, the long-context runs
#   bash results/lab/land-2026-12-04/run.sh b   # at once after: the batch sweep, the matrix
# What lands: the batched fp16 copies whole, on fp16-pair copy kernels (batch.md §24); the
# tensor-core decode attention from 8192 positions (was 32768) with 12-warp blocks where the
# GPU holds them (attention.md §20).
# Predicted (before running):
# - a: every gpu test passes. 8b-int4 graph on, fp16 KV: --context 16384 2.747 -> ~2.50 ms
#   (the bench's 36.3 -> 27.7 us a layer); 32768 2.957 -> ~2.82 (the merge's ~2.4 us and a
#   shorter tail a layer); 131000 6.07 -> ~5.95. fp8 at 131000 4.388 -> ~4.20.
# - b: 8b-int4 at B = 128 ~10.5 ms, 256 ~12.9; batch 1 unchanged (compare: no key regressed).
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/land-2026-12-04/out}
mkdir -p "$out/runs"
b=build-gpu
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
export DB_GIT_COMMIT=$(git log -1 --format=%h 2>/dev/null || echo unknown)
ctx() {  # kv context tokens repeat
  $b/decodebench --model 8b-int4 --graph on --context $2 --kv-cache $1 --tokens $3 --repeat $4 \
    -o "$out/runs/8b-int4-ctx$2-$1.json" 2>&1 | grep -E "TPOT|prefill |rror|decodebench: [a-z]" | grep -v " on cuda: " | sed "s/^/ctx $2 $1: /"
}
case "${1:?usage: run.sh a|b}" in
  a)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_attention_bench decodebench_attention_trace; } \
      >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
    t built
    timeout 240 $b/decodebench_gpu_tests --gtest_brief=1 \
      --gtest_filter='*AttentionMma*:*Attention*:Engine*:Kernels/*:*Batch*:Prefill*:DequantRows*:GemmRowsDequant*:*Golden*:*Graph*' \
      >"$out/gpu-tests.txt" 2>&1
    echo "gpu rc $?"; grep -E "FAILED|tests ran|PASSED" "$out/gpu-tests.txt" | head -20; t gpu
    for kv in fp16 fp8 int8; do ctx $kv 16384 64 3; ctx $kv 32768 64 3; done; t ctx
    ctx fp16 131000 32 2; ctx fp8 131000 32 2; t ctx131000
    for w in 4 12; do timeout 60 $b/decodebench_attention_bench --only 8b --positions 8192,16384,32768,131000 --reps 10 --warps $w; done \
      >"$out/attention_bench.jsonl" 2>&1; grep -E '"kv": "fp16"|"kv": "fp8"' "$out/attention_bench.jsonl" | grep attention_mma | cut -c1-220; t bench
    tar -C "$out" -czf "$out/runs-a.tar.gz" runs && rm -rf "$out/runs"
    ;;
  b)
    timeout 400 $b/decodebench sweep --model 8b-fp16,8b-int8,8b-int4,1b-fp16,1b-int8,1b-int4 --graph on \
      --batch 1-256*2 --tokens 64 --warmup 16 --repeat 3 -o "$out/runs/batch-sweep.jsonl" >"$out/sweep.txt" 2>&1
    echo "sweep rc $?"; tail -3 "$out/sweep.txt"; t sweep
    python3 - "$out/runs/batch-sweep.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    c = r["config"]; print(c.get("model"), c.get("batch", 1), round(r["timing"]["tpot_ms"]["median"], 3))
PY
    m=$(mktemp -d)
    timeout 170 scripts/bench_matrix.sh $b "$m" 2>"$out/matrix.log"; echo "matrix rc $?"
    $b/decodebench report results/h200/*-graph-*.json --format jsonl >"$m/base.jsonl"
    $b/decodebench report "$m"/*-graph-*.json --format jsonl >"$m/new.jsonl"
    $b/decodebench compare "$m/base.jsonl" "$m/new.jsonl" --threshold 1% >"$out/compare.md" 2>&1
    echo "compare exit $?: $(grep -E ' matched: ' "$out/compare.md")"; t matrix
    cp "$m"/matrix.md "$out/" 2>/dev/null; tar -C "$m" -czf "$out/matrix.tar.gz" .
    tar -C "$out" -czf "$out/runs-b.tar.gz" runs && rm -rf "$out/runs"
    ;;
esac
