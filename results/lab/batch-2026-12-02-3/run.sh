#!/usr/bin/env bash
# Before a batch layout for int4 (open-questions: each warp's tile 512 contiguous bytes, as
# Marlin pre-shuffles), two measurements that can kill it without writing the kernel, and
# the batch tests with the HF goldens' sequences 1 and 2 free-running against themselves
# alone. From the repository root, on the GPU machine (libre2-dev as in
# ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02-3/run.sh probe   # run1
#   bash results/lab/batch-2026-12-02-3/run.sh tiled   # run2
#   bash results/lab/batch-2026-12-02-3/run.sh pdl     # run3
#   bash results/lab/batch-2026-12-02-3/run.sh launch  # run4 (with the lab-only switch of launch.patch, in git history)
#   bash results/lab/batch-2026-12-02-3/run.sh final   # run5
#   bash results/lab/batch-2026-12-02-3/run.sh next    # prepared, not run (no device time left)
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
# 4. (pdl, after run2: the tile layout 14% slower, killed; but per matrix the skinny GEMM is
#    ~9.5 us + bytes at ~4 TB/s against the rows GEMV's ~3.2 us + the same, and the skinny
#    kernel was the one GEMM launched without PDL) The skinny GEMM launched with PDL: its
#    trigger first, its first set's weights loaded before the wait. Prediction (before
#    running): int4 a layer at B = 8 69 -> ~45 us, at 16 102 -> ~78; int8 at 8 94 -> ~70; the
#    8b-int4 step at B = 8 2.98 -> ~2.2 ms, at 16 4.11 -> ~3.3. Kill: the int4 layer at B = 8
#    not below 60 us in this one call (the fixed cost is not the launch's serialization).
# 5. (launch, after run3: int4 65 us at B = 8 (kill met), 91 at 16; the 8b-int4 step at 16
#    3.77 ms; but int8 at B <= 8 and the fp16 skinny slower) Which part of the PDL launch
#    costs int8: the same build run three ways by a lab-only switch (launch.patch, in git history,
#    DB_SKINNY_LAUNCH): plain <<<>>>, PDL with the launch helper's carveout, PDL alone.
#    Prediction: plain gives back the landed figures (int4 ~69 us at B = 8, int8 ~94); PDL
#    alone keeps int4's gain and gives int8 back its B <= 8 (the carveout the cause).
#    Decision, not a kill: the launch with the least int8 + int4 time summed over B = 2, 8,
#    16, 64 (picked by the script), with which the batch tests and the committed sweep's
#    skinny rows (8b and 1b, int8 and int4, B = 2..64) run again.
# 6. (final, after run4: PDL with the carveout the best launch; the B = 16 trace spends 276 us
#    of 3796 in 65 RMSNorm kernels, 4.2 us each, the one kernel of the batched step between
#    the GEMMs still launched without PDL) rmsnorm_rows launched with PDL, the skinny GEMM
#    with PDL as run4. Prediction (before running): RMSNorm's exposed time at B = 16 276 ->
#    ~100 us; the 8b-int4 step at 16 3.78 -> ~3.6 ms, at 2 2.81 -> ~2.65. Land if the step
#    improves at B = 16 and no sweep row is more than 1% slower than run4's.
# 7. (next, prepared after run5, not run) The open questions of lab batch §10-§11 in one loan:
#    a. every skinny shape at every batch (`skinny_bench --tune`): does int8 at B <= 8 do
#       better at 4 tiles x 1 chunk than its default 2 x 2 under PDL? Prediction: yes, ~95 us
#       a layer against 104 (int4's shape gained under PDL, int8's 2 x 2 lost). Decision:
#       the default becomes the fastest shape if it is 3% faster.
#    b. 1b-int8 at B = 8 before and after RMSNorm's PDL (81d8245 against f494711), built
#       side by side, alternating, 3 runs a side. Prediction: within 0.5% (run5's +1.5% was
#       the loan). Kill for the worry: the after side slower by more than 1% in this A/B.
#    c. the 8b-int4 step at B = 8 under the tracer: each GEMM's busy and early time beside
#       batch 1's, for the skinny GEMM's fixed cost (open-questions).
#    And a kernel timeline of the 8b-int4 step at B = 1 and 16 (PDL with the carveout):
#    where the B = 16 step's time beside the GEMMs goes (run3: 3.77 ms, of which the skinny
#    GEMMs ~2.9 at the bench's 91 us a layer; B = 1 spends ~0.37 ms beside its GEMVs).
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/lab/batch-2026-12-02-3/run1}
mkdir -p "$out"
b=build-gpu
case "${1:?usage: run.sh probe|tiled|pdl|launch|final|next}" in
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
  pdl)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_skinny_bench; } \
      >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    $b/decodebench_gpu_tests --gtest_filter='*Skinny*:*Batch*' >"$out/gtest-skinny-batch.txt" 2>&1
    tail -1 "$out/gtest-skinny-batch.txt"
    grep -E "FAILED|Failure" -A3 "$out/gtest-skinny-batch.txt" | head -30 || true
    $b/decodebench_skinny_bench >"$out/skinny-bench.txt" 2>&1
    grep -E "^(int4|int8|fp16) +(1|2|8|16|64) " "$out/skinny-bench.txt"
    $b/decodebench sweep --model 8b-int4,8b-int8 --graph on --batch 1,2,8,16,64 --tokens 64 --warmup 8 --repeat 3 \
      -o "$out/sweep-8b.jsonl" >"$out/sweep-8b.txt" 2>"$out/sweep-8b.log" || tail -5 "$out/sweep-8b.log"
    cut -d'|' -f2,12,15 "$out/sweep-8b.txt"
    ;;
  launch)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_kernel_trace decodebench_skinny_bench; } \
      >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    for mode in plain pdl pdl-nocarveout; do
      DB_SKINNY_LAUNCH=$mode $b/decodebench_skinny_bench >"$out/skinny-bench-$mode.txt" 2>&1
      echo "== $mode"
      grep -E "^(int4|int8|fp16) +(1|2|8|16|64) skinny" "$out/skinny-bench-$mode.txt" | awk '{printf "%s/%s %s  ", $1, $2, $4} END {print ""}'
    done
    # The launch with the least int8 + int4 time at B = 2, 8, 16, 64 (one for every scheme).
    best=$(for mode in plain pdl pdl-nocarveout; do
      awk -v m=$mode '$1 ~ /int8|int4/ && $3 == "skinny" && ($2 == 2 || $2 == 8 || $2 == 16 || $2 == 64) {t += $4}
        END {print t, m}' "$out/skinny-bench-$mode.txt"; done | sort -n | head -1 | cut -d' ' -f2)
    echo "best: $best" | tee "$out/best.txt"
    export DB_SKINNY_LAUNCH=$best
    for B in 1 16; do
      DB_TRACE_OUT="/tmp/trace-b$B.csv" CUDA_INJECTION64_PATH=$b/libdecodebench_kernel_trace.so \
        $b/decodebench --model 8b-int4 --graph on --batch $B --tokens 32 --warmup 0 --repeat 1 -o /tmp/t-b$B.json \
        >/dev/null 2>"$out/trace-b$B.log"
      python3 scripts/trace_step.py "/tmp/trace-b$B.csv" 16 | tee "$out/trace-b$B.txt"
    done
    $b/decodebench_gpu_tests --gtest_filter='*Skinny*:*Batch*' >"$out/gtest-skinny-batch.txt" 2>&1
    tail -1 "$out/gtest-skinny-batch.txt"
    grep -E "FAILED|Failure" -A3 "$out/gtest-skinny-batch.txt" | head -30 || true
    # The committed sweep's skinny rows again (results/h200/batch: int8 and int4 at 2..64).
    for M in 8b 1b; do
      $b/decodebench sweep --model $M-int8,$M-int4 --graph on --batch 2-64*2 --tokens 128 --warmup 16 --repeat 5 \
        -o "$out/sweep-$M.jsonl" >"$out/sweep-$M.txt" 2>"$out/sweep-$M.log" || tail -5 "$out/sweep-$M.log"
      cut -d'|' -f2,3,12,15 "$out/sweep-$M.txt"
    done
    ;;
  final)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_kernel_trace; } \
      >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    DB_TRACE_OUT=/tmp/trace-b16.csv CUDA_INJECTION64_PATH=$b/libdecodebench_kernel_trace.so \
      $b/decodebench --model 8b-int4 --graph on --batch 16 --tokens 32 --warmup 0 --repeat 1 -o /tmp/t-b16.json \
      >/dev/null 2>"$out/trace-b16.log"
    python3 scripts/trace_step.py /tmp/trace-b16.csv 16 | tee "$out/trace-b16.txt"
    $b/decodebench_gpu_tests --gtest_filter='*Skinny*:*Batch*:*Prefill*' >"$out/gtest.txt" 2>&1
    tail -1 "$out/gtest.txt"
    grep -E "FAILED|Failure" -A3 "$out/gtest.txt" | head -30 || true
    for M in 8b 1b; do
      $b/decodebench sweep --model $M-fp16,$M-int8,$M-int4 --graph on --batch 2-64*2 --tokens 128 --warmup 16 \
        --repeat 5 -o "$out/sweep-$M.jsonl" >"$out/sweep-$M.txt" 2>"$out/sweep-$M.log" || tail -5 "$out/sweep-$M.log"
      cut -d'|' -f2,3,12,15 "$out/sweep-$M.txt"
    done
    ;;
  next)
    base=/tmp/db-base
    rm -rf $base && mkdir -p $base && git archive 81d8245 | tar -x -C $base
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_kernel_trace decodebench_skinny_bench &&
      cmake -S $base -B $base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
      cmake --build $base/build -j16 --target decodebench; } >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    $b/decodebench_skinny_bench --tune >"$out/skinny-tune.txt" 2>&1
    grep -E "^int8 +(2|8) m" "$out/skinny-tune.txt" | sort -k2,2n -k4,4n
    rm -f "$out/base.jsonl" "$out/head.jsonl"
    for i in 1 2 3; do  # as ../matrix-2026-12-02/run2/ab.sh: a JSONL a side, compared run by run
      for side in base head; do
        bin=$b/decodebench
        [ $side = base ] && bin=$base/build/decodebench
        $bin run --model 1b-int8 --graph on --batch 8 --tokens 128 --warmup 16 --repeat 5 -o /tmp/ab.json \
          >/dev/null 2>>"$out/ab.log" && $b/decodebench report /tmp/ab.json --format jsonl >>"$out/$side.jsonl"
      done
    done
    $b/decodebench compare "$out/base.jsonl" "$out/head.jsonl" --threshold 1% >"$out/ab-compare.md" 2>&1
    grep -E "same|noise|regressed|improved|unstable|Gate" "$out/ab-compare.md" | head -10
    for B in 1 8; do
      DB_TRACE_OUT="/tmp/trace-b$B.csv" CUDA_INJECTION64_PATH=$b/libdecodebench_kernel_trace.so \
        $b/decodebench --model 8b-int4 --graph on --batch $B --tokens 32 --warmup 0 --repeat 1 -o /tmp/t-b$B.json \
        >/dev/null 2>"$out/trace-b$B.log"
      python3 scripts/trace_step.py "/tmp/trace-b$B.csv" 16 | tee "$out/trace-b$B.txt"
    done
    ;;
esac
