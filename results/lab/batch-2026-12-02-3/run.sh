#!/usr/bin/env bash
# Before a batch layout for int4 (open-questions: each warp's tile 512 contiguous bytes, as
# Marlin pre-shuffles), two measurements that can kill it without writing the kernel, and
# the batch tests with the HF goldens' sequences 1 and 2 free-running against themselves
# alone. From the repository root, on the GPU machine (libre2-dev as in
# ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02-3/run.sh probe   # run1
#   bash results/lab/batch-2026-12-02-3/run.sh tiled   # run2
# Outputs go to $OUT, else results/lab/batch-2026-12-02-3/run1.
#
# 1. `decodebench_flight_bench --tiles`: the skinny GEMM's loads (a warp: 8 rows x 64 bytes
#    a load instruction) against the same bytes as 512 contiguous ones, nothing computed, on
#    8b-int4's gate/up and down, 2/4/8 blocks of 128 threads an SM, 1 or 2 sets in flight a
#    warp. Prediction (before running): the two patterns within 5% of each other at every
#    shape, both near the rows GEMV's ~3.3 TB/s at 4+ blocks an SM, lower at 2 (the skinny's
#    occupancy). Kill for the layout lead: if the 8-row pattern is within 10% of contiguous
#    at the skinny's shape (2 blocks an SM, 1 set), the layout is not what holds the skinny
#    GEMM at ~1.7 TB/s, and no kernel is written.
# 2. ../batch-2026-12-02-2/stalls.sh: Nsight Compute's stall reasons of the landed int4
#    skinny kernel at 8 sequences beside the rows GEMV (its prediction in its header).
# 3. (tiled, after run1 found the 8-row pattern 20-30% below contiguous) The landed int4
#    skinny kernel reading the tile layout (skinny.cuh, SkinnyTuning::tiled: 16 rows x 64
#    bytes a warp as two 512-byte loads), timed on one 8b layer and on each of its four
#    matrices alone, beside the rows GEMV at B = 1 and the landed layout. Prediction (before
#    running): gate/up ~20% faster at B = 2..16 (26 -> ~21 us at B = 8, Nsight's figure),
#    the three smaller matrices less (few sets a warp and a split reduction bound them); a
#    layer at B = 8 69 -> ~58 us, at 16 101 -> ~85. Kill: the layer at B = 8 not at or below
#    58 us (15%) in this one call: the layout alone does not pay for holding or converting a
#    second copy of the weights.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/lab/batch-2026-12-02-3/run1}
mkdir -p "$out"
b=build-gpu
case "${1:?usage: run.sh probe|tiled}" in
  probe)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench_gpu_tests decodebench_flight_bench decodebench_skinny_bench; } \
      >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    $b/decodebench_gpu_tests --gtest_filter='EngineBatch*' >"$out/gtest-batch.txt" 2>&1
    tail -1 "$out/gtest-batch.txt"
    grep -E "FAILED|Failure" -A3 "$out/gtest-batch.txt" | head -30 || true
    $b/decodebench_flight_bench --tiles >"$out/tiles.txt" 2>&1
    cat "$out/tiles.txt"
    OUT="$out/stalls" bash results/lab/batch-2026-12-02-2/stalls.sh
    ;;
  tiled)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench_skinny_bench; } >"$out/build.log" 2>&1 ||
      { tail -30 "$out/build.log"; exit 1; }
    for shape in "" "6144 4096" "4096 4096" "28672 4096" "4096 14336"; do
      echo "== ${shape:-8b layer}"
      $b/decodebench_skinny_bench --int4 $shape 2>&1 | grep -E "^int4 +(1|2|8|16|32|64) " | tr -s ' '
    done | tee "$out/tiled.txt"
    ;;
esac
