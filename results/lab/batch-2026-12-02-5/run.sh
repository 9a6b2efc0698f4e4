#!/usr/bin/env bash
# The skinny GEMM with its loads made asynchronous, lane by lane. From the repository root, on
# the GPU machine (libre2-dev as in ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02-5/run.sh async   # run1
# Outputs go to $OUT, else results/lab/batch-2026-12-02-5/run1.
#
# 1. (async) The landed skinny GEMM computes on the registers its loads filled, so a warp
#    issues a set's loads only after the last set's mmas: its chain is the loads' latency
#    plus its dequantization and mmas, one after the other (batch §6-§7: the warps wait on
#    their own chain). A register double buffer cost resident warps (batch §4); the cp.async
#    ring of batch §6 changed the work split too (a block's warps on their own rows, x
#    staged a block, a barrier every set). Here only the data path changes: each lane
#    copies its own weight chunks and its own pieces of x for a set into its own slots of
#    shared memory with cp.async, ST - 1 sets ahead of the set it computes, and reads back
#    only what it wrote (no barrier); same work split, split-K and epilogue. New shapes
#    (skinny.cu, the `s` in m4u1s3b2) join the tuner's list, so a matrix takes them only
#    where they are faster.
#    Prediction (before running): int4 on one 8b layer at B = 16 87.5 us (the sum of the
#    tuned shapes in ../../h200/batch/sweep.jsonl) -> ~65 us; at B = 8 ~59 -> ~48 us; the
#    8b-int4 step at B = 16 3.61 -> ~3.0 ms. Kill: the best async shape's 8b-int4 layer at
#    B = 16 not at or below 75 us after two device calls (~10 minutes).
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/lab/batch-2026-12-02-5/run1}
mkdir -p "$out"
b=build-gpu
build() {
  { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
    cmake --build $b -j16 --target "$@"; } >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
}
gtest() {  # filter, file
  $b/decodebench_gpu_tests --gtest_filter="$1" >"$out/$2" 2>&1
  tail -1 "$out/$2"
  grep -E "FAILED|Failure" -A3 "$out/$2" | head -30 || true
}
case "${1:?usage: run.sh async}" in
  async)
    build decodebench decodebench_gpu_tests decodebench_skinny_bench
    gtest '*Skinny*' gtest-skinny.txt
    { $b/decodebench_skinny_bench --tune --int4 && $b/decodebench_skinny_bench --tune --int8; } >"$out/skinny-tune.txt" 2>&1
    for s in int4 int8; do  # the three fastest shapes of each batch, the best async one, the default
      for B in 2 8 16 32 64; do
        grep -E "^$s +$B m" "$out/skinny-tune.txt" | sort -k4,4n | head -3 | tr -s ' ' | tr '\n' ';'
        grep -E "^$s +$B m[0-9]u[0-9]s" "$out/skinny-tune.txt" | sort -k4,4n | head -1 | tr -s ' ' | tr '\n' ';'
        grep -E "^$s +$B skinny" "$out/skinny-tune.txt" | tr -s ' '
      done
    done
    $b/decodebench sweep --model 8b-int4,8b-int8 --graph on --batch 2,8,16,64 --tokens 128 --warmup 16 --repeat 5 \
      -o "$out/sweep-8b.jsonl" >"$out/sweep-8b.txt" 2>"$out/sweep-8b.log" || tail -5 "$out/sweep-8b.log"
    cut -d'|' -f2,3,12,15 "$out/sweep-8b.txt"
    grep -o '"kernel_shapes":\[[^]]*\]' "$out/sweep-8b.jsonl"
    ;;
esac
