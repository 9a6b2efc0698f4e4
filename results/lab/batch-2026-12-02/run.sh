#!/usr/bin/env bash
# The batched step on the H200. From the repository root, on the GPU machine (libre2-dev as
# in ../measurement-2026-12-01/validate.sh's header):
#   bash results/lab/batch-2026-12-02/run.sh skinny   # build, the skinny GEMM's gpu tests, its bench
#   bash results/lab/batch-2026-12-02/run.sh gpu      # build everything, every gpu test
#   bash results/lab/batch-2026-12-02/run.sh sweep    # 8b and 1b x fp16/int8/int4 x B = 1..256
#   bash results/lab/batch-2026-12-02/run.sh final    # int8/int4 past 64 on cuBLAS; batch 1, 3 runs a key
# Outputs go to $OUT, else results/h200/batch/.
#
# Predictions for the skinny bench (one 8b layer's four linears, written before running):
# - int4 at B = 1 (rows GEMV): ~26 us (109 MB at ~4.2 TB/s). Skinny B = 2..16: ~30-35 us,
#   the weights at ~3.3 TB/s; B = 64: ~100 us (x re-read from L2 by every block: 8x the
#   weight bytes at 2 tiles a warp).
# - fp16 at B = 16: skinny ~105 us, cuBLAS ~110 us (436 MB either way).
# Kill criterion (results/lab/batch.md §2.3): the 8b-int4 step at B = 16 above 1.5x its
# B = 1 TPOT after three device calls: dequantize + cuBLAS becomes the path.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-results/h200/batch}
mkdir -p "$out"
b=build-gpu
case "${1:?usage: run.sh skinny|gpu|sweep|final}" in
  skinny)
    cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON \
      >"$out/build.log" 2>&1 &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_skinny_bench >>"$out/build.log" 2>&1 ||
      { tail -30 "$out/build.log"; exit 1; }
    $b/decodebench_gpu_tests --gtest_filter='*Skinny*:*Probe*:*Compute*' >"$out/gtest-skinny.txt" 2>&1
    tail -3 "$out/gtest-skinny.txt"
    grep -E "FAILED|Failure" "$out/gtest-skinny.txt" | head -20 || true
    $b/decodebench_skinny_bench --tune >"$out/skinny-tune.txt"; grep -v '^.*m[0-9]u' "$out/skinny-tune.txt" | tee "$out/skinny-bench.txt"
    ;;
  gpu)
    cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON \
      >"$out/build.log" 2>&1 && cmake --build $b -j16 >>"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
    ctest --test-dir $b -L gpu -j6 --output-on-failure --timeout 400 >"$out/ctest-gpu.txt" 2>&1
    tail -3 "$out/ctest-gpu.txt"
    grep -E "\(Failed\)|\(Timeout\)|\*\*\*" "$out/ctest-gpu.txt" | head -20 || true
    ;;
  sweep)
    if [ ! -x $b/decodebench ]; then
      cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON \
        >"$out/build.log" 2>&1 && cmake --build $b -j16 --target decodebench decodebench_gpu_tests >>"$out/build.log" 2>&1 ||
        { tail -30 "$out/build.log"; exit 1; }
    fi
    $b/decodebench_gpu_tests --gtest_filter='EngineBatch*' >"$out/gtest-batch.txt" 2>&1
    tail -1 "$out/gtest-batch.txt"
    # The matrix's protocol (scripts/bench_matrix.sh), so that batch 1 compares with the
    # committed matrix key by key.
    for m in 8b 1b; do
      $b/decodebench sweep --model $m-fp16,$m-int8,$m-int4 --graph on --batch 1-256*2 --tokens 128 --warmup 16 \
        --repeat 5 -o "$out/sweep-$m.jsonl" >"$out/sweep-$m.txt" 2>"$out/sweep-$m.log" || tail -5 "$out/sweep-$m.log"
    done
    $b/decodebench report "$out"/sweep-8b.jsonl "$out"/sweep-1b.jsonl --format md >"$out/sweep.md"
    committed=$(ls results/h200/{1b,8b}-*-graph-on.json)
    $b/decodebench report $committed --format jsonl -o "$out/committed-b1.jsonl"
    cat "$out/sweep-8b.jsonl" "$out/sweep-1b.jsonl" >"$out/sweep.jsonl"
    $b/decodebench compare "$out/committed-b1.jsonl" "$out/sweep.jsonl" --threshold 1% \
      >"$out/b1-compare.md" 2>&1
    grep -E "matched|same|slower|faster" "$out/b1-compare.md" | head -12
    ;;
  final)
    cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON \
      >"$out/build.log" 2>&1 && cmake --build $b -j16 --target decodebench decodebench_gpu_tests >>"$out/build.log" 2>&1 ||
      { tail -30 "$out/build.log"; exit 1; }
    $b/decodebench_gpu_tests --gtest_filter='EngineBatch*:Skinny*' >"$out/gtest-final.txt" 2>&1
    tail -1 "$out/gtest-final.txt"; grep -E "^\[  FAILED" "$out/gtest-final.txt" | head
    for m in 8b 1b; do
      $b/decodebench sweep --model $m-int8,$m-int4 --graph on --batch 128,256 --tokens 128 --warmup 16 --repeat 5 \
        -o "$out/sweep-$m-past64.jsonl" >/dev/null 2>"$out/sweep-$m-past64.log" || tail -5 "$out/sweep-$m-past64.log"
    done
    # Batch 1 as scripts/ci_regression.sh measures it: three runs a key.
    $b/decodebench sweep --model 8b-int4,8b-int8,8b-fp16 --graph on --tokens 128 --repeat 5 --runs 3 \
      -o "$out/b1-runs3.jsonl" >/dev/null 2>"$out/b1-runs3.log"
    committed=$(ls results/h200/8b-*-graph-on.json)
    $b/decodebench report $committed --format jsonl -o "$out/committed-8b-b1.jsonl"
    $b/decodebench compare "$out/committed-8b-b1.jsonl" "$out/b1-runs3.jsonl" --threshold 1% >"$out/b1-runs3-compare.md" 2>&1
    grep -E "^\| 8b|matched" "$out/b1-runs3-compare.md"
    ;;
  *) echo "unknown stage" >&2; exit 2 ;;
esac
