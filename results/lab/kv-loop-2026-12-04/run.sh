#!/usr/bin/env bash
# One device call (bash results/lab/kv-loop-2026-12-04/run.sh): what bounds the decode
# attention's KV stream below 0.85 of the read bandwidth (attention.md §23).
# 1. The wgmma + TMA GEMM bench, first run (results/lab/wgmma-2026-12-04/README.md: predicted
#    600-680 TFLOP/s at 8192^3; kill below 400).
# 2. The cache's layout: 8b's per-head work (4 query heads on a kv head, head_dim 128) on the
#    cache as it lies ([position][kv head][dim]: a tile is 16 rows of 256 bytes 2 KB apart)
#    against one kv head at 8x the positions (the same bytes, each tile 4 KB end to end), the
#    same 128 blocks. Predicted: within 3% (HBM pages are not the bound); if contiguous is >= 5%
#    faster, a head-major cache is the lead for both 32768 fp16 and 131000 fp8.
# 3. ncu of the fp8 kernel at 131000 and the fp16 one at 32768: where the warps wait.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/kv-loop-2026-12-04/out}
mkdir -p "$out/ncu"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench_attention_bench decodebench_wgmma_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
timeout 90 $b/decodebench_wgmma_bench >"$out/wgmma.txt" 2>&1; echo "wgmma rc $?"; tail -20 "$out/wgmma.txt"; t wgmma
ab=$b/decodebench_attention_bench
{
  timeout 60 $ab --only 8b --positions 32768 --kv fp16 --reps 10
  timeout 60 $ab --shape 4,1,128 --positions 262144 --kv fp16 --splits 128 --reps 10
  timeout 60 $ab --only 8b --positions 131000 --kv fp8 --reps 10
  timeout 90 $ab --shape 4,1,128 --positions 1048000 --kv fp8 --splits 128 --reps 10
  timeout 60 $ab --only 8b --positions 131000 --kv fp16 --reps 10
  timeout 90 $ab --shape 4,1,128 --positions 1048000 --kv fp16 --splits 128 --reps 10
} >"$out/layout.jsonl" 2>&1
grep attention_mma "$out/layout.jsonl" | cut -c1-240; t layout
for run in "fp8 131000" "fp16 32768"; do
  set -- $run
  timeout 120 ncu --clock-control none -k regex:attention_mma_kernel --launch-skip 1 --launch-count 1 --set full \
    --import-source yes -o "$out/ncu/$1-$2" $ab --only 8b --positions $2 --kv $1 --reps 1 --layers 1 \
    >"$out/ncu/$1-$2.log" 2>&1
  ncu --import "$out/ncu/$1-$2.ncu-rep" --page details >"$out/ncu/$1-$2-details.txt" 2>&1
  ncu --import "$out/ncu/$1-$2.ncu-rep" --page source --csv --print-source sass >"$out/ncu/$1-$2-sass.csv" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Issued Warp|Achieved Occupancy|Stall" \
    "$out/ncu/$1-$2-details.txt" | head -20
done
t ncu
tar -C "$out" -czf "$out/ncu.tar.gz" ncu && rm -rf "$out/ncu"
