#!/usr/bin/env bash
# Device call 4 (bash results/lab/kv-loop-2026-12-04/run4.sh): the whole gpu test binary on the
# tree with run2's loop (one process, every gpu test; it has not run whole on one tree since
# 2026-12-03). The machine stays warm for run5.sh, which reuses this build.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/kv-loop-2026-12-04/out4}
mkdir -p "$out"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
git rev-parse HEAD 2>/dev/null | head -1
timeout 420 $b/decodebench_gpu_tests >"$out/gpu-all.txt" 2>&1
echo "gpu rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|^\[  FAILED  \]" "$out/gpu-all.txt" | head -20
grep -c "^\[       OK \]" "$out/gpu-all.txt"; tail -3 "$out/gpu-all.txt"; t gpu
grep -E "^\[ *(OK|FAILED|SKIPPED) \]|^\[==========\]|^\[  PASSED  \]" "$out/gpu-all.txt" >"$out/gpu-summary.txt"
gzip -f "$out/gpu-all.txt"
