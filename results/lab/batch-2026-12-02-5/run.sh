#!/usr/bin/env bash
# The skinny GEMM with its loads made asynchronous, lane by lane. From the repository root, on
# the GPU machine (libre2-dev as in ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02-5/run.sh async   # run1 (failed launches), run2
#   bash results/lab/batch-2026-12-02-5/run.sh trace   # run3
#   bash results/lab/batch-2026-12-02-5/run.sh norm    # run4
#   bash results/lab/batch-2026-12-02-5/run.sh resweep # run5
#   bash results/lab/batch-2026-12-02-5/run.sh gpu     # run6
#   bash results/lab/batch-2026-12-02-5/run.sh copy    # run7
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
# 2. (trace, after run2: the best async shape 160 us at B = 16, 1.4-3x slower everywhere,
#    killed; lab batch §15) 8b-int8's step is slower at B = 8 (3.758 ms) than at 16 (3.409),
#    though its four GEMMs timed alone at load are faster at 8 (81.2 us a layer summed,
#    against 85.8: config.kernel_shapes of the committed sweep). Kernel traces of both steps,
#    and 8b-int4's at 8 and 16, to say where the step's extra time is. Prediction (before
#    running): the GEMMs, not the rest: at B = 8 int8's GEMMs take >= 15 us a layer more in
#    the step than their load-time sum (its shapes aim at 4-8 blocks an SM and run beside the
#    kernel before them under PDL), at 16 within ~5 us. A measurement, one call; if it holds,
#    the shapes are timed in the step's company next, with its own kill criterion.
# 3. (norm, after run3: the GEMMs take their load-time sums in the step, the prediction
#    wrong; the 65 RMSNorm kernels are 218-223 us exposed at B = 8 and 16 on every loan so
#    far, ~3.4 us each) rmsnorm_rows keeps a row's values in registers from the sum to the
#    scaling and loads its norm weights before the PDL wait (prefill.cu; the same bits), so
#    that after the wait its chain is one round trip for the row instead of three (row, norm
#    weights, row again). Prediction (before running): the norms' exposed time in the traced
#    8b-int4 step at B = 16 223 -> ~150 us, the step ~2% faster. Land if the norms' exposed
#    time falls by at least 30 us in the trace and the batch and prefill tests pass; else
#    revert. One call.
# 4. (resweep, after run4: the norms 223 -> 114 us, landed; lab batch §17) The committed
#    batch sweep (../../h200/batch) again from one build, every row, since every batched step
#    runs the new norm: the gpu tests of the batched paths, then
#    `sweep --model M-fp16,M-int8,M-int4 --batch 1-256*2` for M = 8b, 1b. A measurement; the
#    expectation (before running): every row at B > 1 2-5% faster than the committed one,
#    batch 1 within 1%.
# 5. (gpu, after run5: all 36 rows at B = 2..64 0.5-5.1% faster, lab batch §18) Every gpu
#    test of the final code (`ctest -L gpu`), and the main job. No prediction beyond "they
#    pass and batch 1 is unchanged".
# 6. (copy, after run6: 432/432) Past 64 sequences int4 runs cuBLAS on an fp16 copy made every
#    step, ~10.5 of the 8b step's 16.1 ms at B = 128 and ~1.7 TB/s (lab batch §13), where
#    int8's copy of the same grid shape streams ~3.8 TB/s. §13's chunk kernel (16 bytes a
#    thread) kept a row's blocks of one piece a thread and was 3% faster. Here the same
#    conversion runs grid-stride over one wave of blocks, each thread with 4 chunks' loads
#    in flight before it converts any (prefill.cu, dequantize_repacked_chunks_kernel; the
#    same bits, the test extended to groups of 32 / 128 / a row and a grid that goes round).
#    Prediction (before running): the copy near int8's rate, the 8b-int4 step at B = 128 /
#    256 16.12 / 19.30 -> ~11 / ~14 ms, 1b-int4 2.93 / 3.52 -> ~2.2 / ~2.8. Kill: 8b-int4 at
#    128 not at least 10% faster in this call (the last of the device budget), then revert.
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
case "${1:?usage: run.sh async|trace|norm|resweep|gpu|copy}" in
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
  trace)
    build decodebench decodebench_kernel_trace
    for mb in 8b-int8:8 8b-int8:16 8b-int4:8 8b-int4:16; do
      m=${mb%:*} B=${mb#*:}
      $b/decodebench --model $m --graph on --batch $B --tokens 128 --warmup 16 --repeat 5 -o "$out/$m-b$B.json" \
        >/dev/null 2>"$out/$m-b$B.log" || tail -3 "$out/$m-b$B.log"
      python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r["timing"]["tpot_ms"]["median"]); print("\n".join(r["config"]["kernel_shapes"]))' "$out/$m-b$B.json" "$m B=$B"
      DB_TRACE_OUT=/tmp/t.csv CUDA_INJECTION64_PATH=$b/libdecodebench_kernel_trace.so \
        $b/decodebench --model $m --graph on --batch $B --tokens 16 --warmup 0 --repeat 1 -o /tmp/t.json \
        >/dev/null 2>"$out/trace-$m-b$B.log"
      python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["config"]["kernel_shapes"]))' /tmp/t.json \
        >"$out/trace-$m-b$B-shapes.txt"
      python3 scripts/trace_step.py /tmp/t.csv 8 | tee "$out/trace-$m-b$B.txt" | head -16
    done
    ;;
  norm)
    build decodebench decodebench_gpu_tests decodebench_kernel_trace
    gtest '*Batch*:*Prefill*:*Golden*' gtest.txt
    for mb in 8b-int4:16 8b-int4:2 1b-int4:16; do
      m=${mb%:*} B=${mb#*:}
      DB_TRACE_OUT=/tmp/t.csv CUDA_INJECTION64_PATH=$b/libdecodebench_kernel_trace.so \
        $b/decodebench --model $m --graph on --batch $B --tokens 16 --warmup 0 --repeat 1 -o /tmp/t.json \
        >/dev/null 2>"$out/trace-$m-b$B.log"
      python3 scripts/trace_step.py /tmp/t.csv 8 >"$out/trace-$m-b$B.txt"
      echo "$m B=$B: $(head -1 "$out/trace-$m-b$B.txt") / $(grep -E '^ +rmsnorm' "$out/trace-$m-b$B.txt" | tr -s ' ')"
    done
    $b/decodebench sweep --model 8b-int4,8b-int8,1b-int4 --graph on --batch 2,16 --tokens 128 --warmup 16 --repeat 5 \
      -o "$out/sweep.jsonl" >"$out/sweep.txt" 2>"$out/sweep.log" || tail -5 "$out/sweep.log"
    cut -d'|' -f2,3,12,15 "$out/sweep.txt"
    $b/decodebench --model 8b-int4 --graph on -o "$out/main.json" >"$out/main.txt" 2>"$out/main.log"
    tail -3 "$out/main.txt"
    ;;
  resweep)
    build decodebench decodebench_gpu_tests
    gtest '*Batch*:*Prefill*:*Golden*' gtest.txt
    for M in 8b 1b; do
      timeout 240 $b/decodebench sweep --model $M-fp16,$M-int8,$M-int4 --graph on --batch 1-256*2 --tokens 128 \
        --warmup 16 --repeat 5 -o "$out/sweep-$M.jsonl" >"$out/sweep-$M.txt" 2>"$out/sweep-$M.log" ||
        tail -5 "$out/sweep-$M.log"
      cut -d'|' -f2,3,12,15 "$out/sweep-$M.txt"
    done
    ;;
  gpu)
    build all
    timeout 420 ctest --test-dir $b -L gpu -j6 --output-on-failure --timeout 300 >"$out/ctest-gpu.txt" 2>&1
    tail -3 "$out/ctest-gpu.txt"
    grep -E "\(Failed\)|\(Timeout\)|\*\*\*" "$out/ctest-gpu.txt" | head -20 || true
    $b/decodebench --model 8b-int4 --graph on -o "$out/main.json" >"$out/main.txt" 2>"$out/main.log"
    grep TPOT "$out/main.txt"
    ;;
  copy)
    build decodebench decodebench_gpu_tests
    gtest 'Prefill.Repacked*:*b65*' gtest.txt
    $b/decodebench sweep --model 8b-int4,1b-int4 --graph on --batch 128,256 --tokens 128 --warmup 16 --repeat 5 \
      -o "$out/sweep.jsonl" >"$out/sweep.txt" 2>"$out/sweep.log" || tail -5 "$out/sweep.log"
    cut -d'|' -f2,3,12,15 "$out/sweep.txt"
    ;;
esac
