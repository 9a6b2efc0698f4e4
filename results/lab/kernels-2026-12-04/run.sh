#!/usr/bin/env bash
# The first GPU run of the merged kernels (KV cache schemes, tensor-core decode attention, the
# columns GEMV, the quantized GEMM): build with the benches, their gpu tests, each bench once,
# and the main job's TPOT at contexts 0 / 32768. From the repository root on the GPU machine:
#   bash results/lab/kernels-2026-12-04/run.sh first
# Predictions and kill criteria (written before running):
# - attention_mma, 8b shape, fp16, 32768 positions: 32-40 us a layer (today ~59); kill if
#   incorrect or > 0.8x today's after two device calls.
# - columns GEMV, one 8b-int4 layer at B = 2: <= 1.10x the batch-1 GEMV (~42-46 us); kill the
#   path for a scheme whose B = 2 layer is not faster than the skinny GEMM / cuBLAS.
# - quantized GEMM, int4 gate_up at B = 256: >= 250 TFLOP/s (helper's estimate ~300); kill if
#   below or incorrect after two calls.
# - fp8/int8 KV in today's attention kernels: all KvAttention/KvEngine tests pass.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/kernels-2026-12-04/run1}
mkdir -p "$out"
b=build-gpu
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
case "${1:?usage: run.sh first|verify}" in
  verify)
    # After run1: the quantized GEMM reverted, the columns GEMV at 2, the tensor-core attention
    # from 32768. Predicted: ctest -L cpu and -L gpu all pass; int8 and fp16 columns at B = 2
    # faster than the skinny GEMM / cuBLAS; 8b-int4 B = 2 ~2.2 ms (2.51 before); --context
    # 32768: fp16 ~3.2 ms, fp8 and int8 ~2.7 ms.
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_tests decodebench_gpu_tests decodebench_gpu_energy_tests decodebench_skinny_bench decodebench_kv_accuracy; } >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
    t built
    (cd $b && timeout 150 ctest -L cpu -j16 -E format_check) >"$out/ctest-cpu.txt" 2>&1; grep -E "tests passed|tests failed|Failed|Timeout" "$out/ctest-cpu.txt" | head; t cpu
    (cd $b && timeout 260 ctest -L gpu -j8 --output-on-failure) >"$out/ctest-gpu.txt" 2>&1; grep -E "tests passed|tests failed|\*\*\*Failed|Timeout" "$out/ctest-gpu.txt" | head -20; t gpu
    for s in --int8 --fp16; do timeout 30 $b/decodebench_skinny_bench $s 2>&1 | head -8; done | tee "$out/bench.txt"; t bench
    r=$(mktemp -d)
    $b/decodebench --model 8b-int4 --graph on -o $r/b1.json 2>&1 | grep TPOT
    for m in 8b-int4 8b-int8 8b-fp16; do $b/decodebench --model $m --graph on --batch 2 -o $r/$m-b2.json 2>&1 | grep TPOT; done
    for kv in fp16 fp8 int8; do $b/decodebench --model 8b-int4 --graph on --context 32768 --kv-cache $kv --tokens 64 --repeat 3 -o $r/ctx32768-$kv.json 2>&1 | grep -E "TPOT|rror"; done
    t runs
    timeout 90 $b/decodebench_kv_accuracy --model 8b-int4 --contexts 1024,8192 --steps 32 >$r/kv-accuracy-8b-int4.json 2>&1; tail -c 1500 $r/kv-accuracy-8b-int4.json
    tar -C $r -czf "$out/runs.tar.gz" .; t done
    ;;
  first)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_tests decodebench_gpu_tests decodebench_attention_bench decodebench_skinny_bench decodebench_quant_gemm_bench decodebench_kv_accuracy; } >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
    t built
    (cd $b && timeout 120 ./decodebench_tests 2>&1 | tail -3) > "$out/cpu-tests.txt"; cat "$out/cpu-tests.txt"
    t cpu
    timeout 150 $b/decodebench_gpu_tests --gtest_filter='*AttentionMma*:*Columns*:*QuantGemm*:LinearPlan*:KvCacheCli*' \
      >"$out/gpu-new.txt" 2>&1; grep -E "PASSED|FAILED|tests ran" "$out/gpu-new.txt" | head -30
    t gpu-new
    timeout 60 $b/decodebench_attention_bench >"$out/attention_bench.jsonl" 2>&1; tail -30 "$out/attention_bench.jsonl"
    t attention-bench
    timeout 40 $b/decodebench_skinny_bench --int4 >"$out/cols-int4.txt" 2>&1; tail -12 "$out/cols-int4.txt"
    t cols-bench
    timeout 40 $b/decodebench_quant_gemm_bench >"$out/qg.jsonl" 2>&1; tail -30 "$out/qg.jsonl"
    t qg-bench
    for ctx in 0 32768; do $b/decodebench --model 8b-int4 --graph on --context $ctx --tokens 64 --repeat 3 2>&1 | grep -E "TPOT|error|rror" | head -3; done
    t runs
    ;;
esac
