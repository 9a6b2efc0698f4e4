#!/usr/bin/env bash
# The skinny GEMM's int4 loop on the H200: two variants, each against the register-fed kernel
# of results/lab/batch.md §4 (int4 67-69 us a layer at B = 2..8, 98 us at 16; the rows GEMV
# 39.9 us at B = 1). From the repository root, on the GPU machine (libre2-dev as in
# ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02-2/run.sh tune    # build, skinny tests, bench --tune, a short step sweep
#   bash results/lab/batch-2026-12-02-2/run.sh ncu     # Nsight Compute on the int4 default shape and the rows GEMV
#   bash results/lab/batch-2026-12-02-2/run.sh matrix  # the batch-1 matrix (scripts/bench_matrix.sh), compared with results/h200
#                                                       # (its outputs: ../matrix-2026-12-02/run1/)
# Outputs go to $OUT, else results/lab/batch-2026-12-02-2/.
#
# 1. Weights through a cp.async ring in shared memory (skinny-pipe.patch, against 72d6ce2, in git history,
#    is run2's kernel; run1/, run2/). Predicted: ~96 KB of weights in flight an SM instead of at most 32 KB:
#    int4 ~45 us a layer at B = 2..8, ~55 us at 16, ~120 us at 64; the 8b-int4 step at B = 16
#    ~2.3 ms. Kill: int4 at B = 8 above 52 us a layer (1.3x the rows GEMV) after two calls.
# 2. The register-fed kernel with the int4 scale applied to each set's sums instead of every
#    weight (a set of four chunks is one group at group size 128): 16 of 44 instructions a
#    chunk's dequantization fewer. Predicted: int4 B = 2..8 ~58 us (the loop is issue- and
#    latency-bound, run2's Nsight Compute; run3/). Kill: not 10% faster than 67 us at B = 8 in one call.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/lab/batch-2026-12-02-2}
mkdir -p "$out"
b=build-gpu
case "${1:?usage: run.sh tune|ncu|matrix}" in
  tune)
    cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON \
      >"$out/build.log" 2>&1 &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_skinny_bench >>"$out/build.log" 2>&1 ||
      { tail -30 "$out/build.log"; exit 1; }
    $b/decodebench_gpu_tests --gtest_filter='*Skinny*' >"$out/gtest-skinny.txt" 2>&1
    tail -1 "$out/gtest-skinny.txt"
    grep -E "FAILED|Failure" -A3 "$out/gtest-skinny.txt" | head -30 || true
    $b/decodebench_skinny_bench ${TUNE:+--tune} >"$out/skinny-tune.txt" 2>&1  # TUNE=1: every shape
    grep -v ' m[0-9]u' "$out/skinny-tune.txt" | grep -v cublas | tee "$out/skinny-bench.txt"
    for s in int8 int4; do for B in 1 8 16 64; do
      grep -E "^$s +$B m" "$out/skinny-tune.txt" | sort -k4,4n | head -2
    done; done
    $b/decodebench sweep --model 8b-int4,8b-int8 --graph on --batch 1-64*2 --tokens 64 --warmup 8 --repeat 3 \
      -o "$out/sweep-8b.jsonl" >"$out/sweep-8b.txt" 2>"$out/sweep-8b.log" || tail -5 "$out/sweep-8b.log"
    cut -d'|' -f2,12,15 "$out/sweep-8b.txt"
    ;;
  ncu)
    # The pipelined kernel's default int4 shape at B = 1 on 8b's gate/up and qkv, beside the rows GEMV.
    ncu --clock-control none --kernel-name-base mangled --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section WarpStateStats --section MemoryWorkloadAnalysis -k 'regex:skinny_kernel.*SchemeE2ELi2ELi1ELi1ELi4E' -c 2 \
      $b/decodebench_skinny_bench 28672 4096 6144 4096 >"$out/ncu-skinny.txt" 2>&1
    ncu --clock-control none --kernel-name-base mangled --section SpeedOfLight --section Occupancy --section WarpStateStats \
      -k 'regex:gemv_rows_kernelILNS_6SchemeE2' -c 2 $b/decodebench_skinny_bench 28672 4096 6144 4096 >"$out/ncu-gemv.txt" 2>&1
    grep -E "Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit Sh|Block Limit Reg|Dynamic Shared|Warp Cycles Per Issued|Issued Ipc|Issue Slots Busy|Grid Size" \
      "$out/ncu-skinny.txt" | head -40
    ;;
  matrix)
    scripts/bench_matrix.sh $b "$out/matrix" 2>"$out/matrix.log" || tail -5 "$out/matrix.log"
    names=$(cd "$out/matrix" && ls *.json)
    $b/decodebench report $(for n in $names; do echo results/h200/$n; done) --format jsonl -o "$out/committed.jsonl"
    $b/decodebench report "$out"/matrix/*.json --format jsonl -o "$out/matrix.jsonl"
    $b/decodebench compare "$out/committed.jsonl" "$out/matrix.jsonl" --threshold 1% >"$out/matrix-compare.md" 2>&1
    grep -E "matched|regressed|improved|unstable|noise" "$out/matrix-compare.md" | head -40
    ;;
esac
