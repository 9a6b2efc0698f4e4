#!/usr/bin/env bash
# Device call 3 (bash results/lab/kv-loop-2026-12-04/run3.sh): ncu of the loop after run2's
# changes (1ef2405), fp8 at 131000 and fp16 at 32768, with the SASS's per-instruction counts:
# did the instructions a tile drop as counted (fp8 560 -> ~400, fp16 426 -> ~230), and what
# bounds the loop now.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/kv-loop-2026-12-04/out3}
mkdir -p "$out/ncu"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench_attention_bench; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
ab=$b/decodebench_attention_bench
for run in "fp8 131000" "fp16 32768" "int8 131000"; do
  set -- $run
  timeout 120 ncu --clock-control none -k regex:attention_mma_kernel --launch-skip 1 --launch-count 1 --set full \
    --import-source yes -o "$out/ncu/$1-$2" $ab --only 8b --positions $2 --kv $1 --reps 1 --layers 1 \
    >"$out/ncu/$1-$2.log" 2>&1
  ncu --import "$out/ncu/$1-$2.ncu-rep" --page details >"$out/ncu/$1-$2-details.txt" 2>&1
  ncu --import "$out/ncu/$1-$2.ncu-rep" --page source --csv --print-source sass >"$out/ncu/$1-$2-sass.csv" 2>&1
  rm -f "$out/ncu/$1-$2.ncu-rep"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|SM Active Cycles|Elapsed Cycles" \
    "$out/ncu/$1-$2-details.txt" | head -8
done
t ncu
tar -C "$out" -czf "$out/ncu.tar.gz" ncu && rm -rf "$out/ncu"
