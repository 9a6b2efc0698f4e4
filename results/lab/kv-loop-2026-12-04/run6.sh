#!/usr/bin/env bash
# The whole gpu test binary in four shards, one device call each (bash
# results/lab/kv-loop-2026-12-04/run6.sh SHARD, SHARD 0..3): run4 found that one process needs
# more than the 600 s a device command may run (495 of 1,327 tests in 420 s, none failed).
# gtest's sharding splits the tests round robin, so each shard takes ~1/4 of every suite.
set -uo pipefail
shard=${1:?usage: run6.sh SHARD (0..3)}
cd "$(dirname "$0")/../../.."
. results/lab/device-env.sh
out=${OUT:-results/lab/kv-loop-2026-12-04/out6}
mkdir -p "$out"
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  cmake --build $b -j16 --target decodebench decodebench_gpu_tests; } \
  >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
t built
GTEST_TOTAL_SHARDS=4 GTEST_SHARD_INDEX=$shard timeout 450 $b/decodebench_gpu_tests >"$out/gpu-shard$shard.txt" 2>&1
echo "shard $shard rc $?"
grep -E "^\[  (PASSED|FAILED) |tests ran|^\[  FAILED  \]" "$out/gpu-shard$shard.txt" | head -20
grep -c "^\[       OK \]" "$out/gpu-shard$shard.txt"; t gpu
grep -E "^\[ *(OK|FAILED|SKIPPED) \]|^\[==========\]|^\[  PASSED  \]" "$out/gpu-shard$shard.txt" >"$out/gpu-shard$shard-summary.txt"
gzip -f "$out/gpu-shard$shard.txt"
