#!/usr/bin/env bash
# The KV stream of the tensor-core decode attention at 32768 and 131000 positions: where its
# time goes. From the repository root on the GPU machine:
#   bash results/lab/kv-stream-2026-12-04/run.sh probe
# Predictions (written before running):
# - attention bench, 8b layer, fp16, back-to-back launches over 4 layers (us_train): the mma
#   kernel ~50 us at 32768 (0.6 of read), ~150 us at 131000 (0.8); the cold-L2 figure (us)
#   ~10 us above it, the memset's dirty lines written back under the kernel.
# - ncu at 32768: DRAM throughput ~60% of peak, the warps stalled mostly on long scoreboard /
#   barrier-free waits (cp.async), issue slots < 30% busy: not compute-bound.
# - 8b-int4 --context 32768: fp16 KV 3.2 ms, fp8 and int8 ~2.6-2.7 ms.
# Kill criterion for this line of inquiry (the mma kernel's KV stream): 2 device calls of
# changes after this one; if 8b-int4 at 32768 is not below 3.0 ms by then, write it down.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/kv-stream-2026-12-04/out}
mkdir -p "$out"
b=build-gpu
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
build() {
  { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
    cmake --build $b -j16 --target "$@"; } >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
  t built
}
ctx() {  # model kv context [extra...]
  local m=$1 kv=$2 c=$3; shift 3
  $b/decodebench --model $m --graph on --context $c --kv-cache $kv --tokens 64 --repeat 3 -o "$out/runs/$m-ctx$c-$kv.json" "$@" 2>&1 | grep -E "TPOT|prefill|rror|decodebench:"
}
mkdir -p "$out/runs"
export DB_GIT_COMMIT=$(git log -1 --format=%h 2>/dev/null || echo unknown)
case "${1:?usage: run.sh probe|dyn|why|trace|final|sweep|next}" in
  next)
    # Not run yet (no device time left): 12-warp blocks against 4 (the trace's variant), the
    # chunk / tensor-core switch (the bench at 8192 and 16384), the fp16 step at 131000 and the
    # 8-bit caches' accuracy on the H200. Predicted: 12 warps merge in ~2.5 us (6.6 with 4) and
    # take ~4 us off a launch at 32768; the tensor-core kernel faster than attention() from
    # 8192; 8b-int4 --context 131000 fp16 ~6.1 ms (the bench's 0.87 of read).
    build decodebench decodebench_attention_bench decodebench_attention_trace decodebench_attention_trace12 decodebench_kv_accuracy
    for tool in decodebench_attention_trace decodebench_attention_trace12; do for p in 32768 131000; do for kv in fp16 fp8; do
      timeout 60 $b/$tool --positions $p --kv $kv; done; done; done >"$out/trace-4-12.jsonl" 2>&1
    cat "$out/trace-4-12.jsonl"; t trace
    timeout 150 $b/decodebench_attention_bench --only 8b --reps 10 >"$out/attention_bench.jsonl" 2>&1
    grep -E '"positions": (4096|8192|16384|32768)' "$out/attention_bench.jsonl"; t bench
    ctx 8b-int4 fp16 131000; t ctx131000
    timeout 120 $b/decodebench_kv_accuracy --model 8b-int4 --contexts 1024,8192,32768 --steps 32 >"$out/kv-accuracy.json" 2>&1
    tail -c 1500 "$out/kv-accuracy.json"; t accuracy
    tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$out/runs"
    ;;
  sweep)
    # Run on the machine `final` left warm, with its build (no rebuild): the fp8 step at 131000
    # (final's own call passed --tokens twice) and the context sweep of results/h200/kv-cache.
    $b/decodebench --model 8b-int4 --graph on --context 131000 --kv-cache fp8 --tokens 32 --repeat 2 -o "$out/runs/8b-int4-ctx131000-fp8.json" 2>&1 | grep -E "TPOT|prefill |rror"
    $b/decodebench sweep --model 8b-int4 --graph on --kv-cache fp16,fp8,int8 --context 0-131072*4 --tokens 32 --repeat 2 \
      -o "$out/runs/context-sweep-x4.jsonl" >"$out/sweep-x4.txt" 2>&1
    ;;
  final)
    # The merge's loads in batches of 16 partials (a round trip a batch), and one tile a warp
    # before the wait (the others after the queries' operands are requested). Predicted from
    # `trace`: the merge 12 -> ~3 us, the queries ready ~3 us earlier; 8b layer at 32768
    # 56 -> ~45 us (us_train); 8b-int4 --context 32768 fp16 3.10 -> ~2.75 ms, fp8 / int8
    # 2.74 -> ~2.45; at 131000 fp8 ~4.3 ms (target 4.0).
    build decodebench decodebench_gpu_tests decodebench_attention_bench decodebench_attention_trace
    timeout 200 $b/decodebench_gpu_tests --gtest_filter='*AttentionMma*:AttentionLongCache*' >"$out/gpu-attn.txt" 2>&1; echo "gpu rc $?"
    grep -E "PASSED|FAILED|tests ran" "$out/gpu-attn.txt" | head; t gpu
    for kv in fp16 fp8 int8; do ctx 8b-int4 $kv 32768; done; t ctx32768
    for p in 32768 131000; do for kv in fp16 fp8; do
      timeout 60 $b/decodebench_attention_trace --positions $p --kv $kv; done; done >"$out/trace.jsonl" 2>&1
    timeout 60 $b/decodebench_attention_trace --positions 32768 --kv fp16 --splits 24 >>"$out/trace.jsonl" 2>&1
    cat "$out/trace.jsonl"; t trace
    for p in 32768 131000; do timeout 90 $b/decodebench_attention_bench --only 8b --positions $p --reps 10; done >"$out/attention_bench.jsonl" 2>&1
    grep -v '"kernel": "attention"' "$out/attention_bench.jsonl"; t bench
    ctx 8b-int4 fp8 131000 --tokens 32 --repeat 2; t ctx131000
    timeout 170 $b/decodebench sweep --model 8b-int4 --graph on --kv-cache fp16,fp8,int8 --context 0-131072*8 \
      --tokens 32 --repeat 2 -o "$out/runs/context-sweep.jsonl" >"$out/sweep.txt" 2>&1; echo "sweep rc $?"; tail -3 "$out/sweep.txt"; t sweep
    tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$out/runs"
    ;;
  trace)
    # The static split back (the shared tiles made the step nondeterministic: `dyn`'s context
    # runs failed the repetitions' token check), with the one-pass merge. The timeline of one
    # launch by phase (decodebench_attention_trace). Predicted: the blocks start within ~2 us
    # of each other; queries ready ~2-6 us after the start (a round trip behind the first
    # tiles' burst); the loops' ends spread over ~10 us; the merge ~3 us.
    build decodebench decodebench_gpu_tests decodebench_attention_bench decodebench_attention_trace
    for p in 32768 131000; do for kv in fp16 fp8; do for sp in 0 24; do
      timeout 60 $b/decodebench_attention_trace --positions $p --kv $kv --splits $sp; done; done; done >"$out/trace.jsonl" 2>&1
    cat "$out/trace.jsonl"; t trace
    timeout 200 $b/decodebench_gpu_tests --gtest_filter='*AttentionMma*:AttentionLongCache*' >"$out/gpu-attn.txt" 2>&1; echo "gpu rc $?"
    grep -E "PASSED|FAILED|tests ran" "$out/gpu-attn.txt" | head; t gpu
    for p in 32768 131000; do timeout 90 $b/decodebench_attention_bench --only 8b --positions $p --reps 10; done >"$out/attention_bench.jsonl" 2>&1
    grep -v '"kernel": "attention"' "$out/attention_bench.jsonl"; t bench
    for kv in fp16 fp8 int8; do ctx 8b-int4 $kv 32768; done
    t runs
    ;;
  why)
    # The context runs of `dyn` printed no result: the whole output of one, and the kernel's
    # gpu tests at 5000 and 70000 positions.
    build decodebench decodebench_gpu_tests
    $b/decodebench --model 8b-int4 --graph on --context 32768 --tokens 16 --repeat 1 >"$out/ctx.txt" 2>&1; echo "rc $?"; tail -5 "$out/ctx.txt"
    $b/decodebench --model 8b-int4 --graph off --context 32768 --tokens 16 --repeat 1 >"$out/ctx-eager.txt" 2>&1; echo "rc $?"; tail -5 "$out/ctx-eager.txt"
    t ctx
    timeout 300 $b/decodebench_gpu_tests --gtest_filter='*AttentionMma*' >"$out/gpu-attn.txt" 2>&1; echo "rc $?"
    grep -E "PASSED|FAILED|tests ran|Failure|outside" "$out/gpu-attn.txt" | head -20; t gpu
    ;;
  dyn)
    # The kv head's tiles shared by its blocks through a counter, and the one-pass merge
    # (attention.md §19). Predicted: us_train at 32768 57 -> 43-45, at 131000 152 -> 130-135;
    # 8b-int4 --context 32768 fp16 3.16 -> ~2.75 ms; fp8 / int8 2.75 -> ~2.45.
    build decodebench decodebench_tests decodebench_gpu_tests decodebench_attention_bench
    timeout 60 $b/decodebench_tests --gtest_filter='AttentionMmaPlan*' 2>&1 | tail -2
    timeout 240 $b/decodebench_gpu_tests --gtest_filter='AttentionMma*:AttentionLongCache*' >"$out/gpu-attn.txt" 2>&1
    grep -E "PASSED|FAILED|tests ran" "$out/gpu-attn.txt" | head -20
    grep -E "attention_mma: largest error" "$out/gpu-attn.txt" | sort -t' ' -k2 | awk '{print $(NF-3)}' | sort -n | tail -1 | sed 's/^/mma worst fraction of bound: /'; t gpu
    for p in 32768 131000; do timeout 90 $b/decodebench_attention_bench --only 8b --positions $p --sweep --reps 10; done >"$out/attention_bench.jsonl" 2>&1
    grep -v '"kernel": "attention"' "$out/attention_bench.jsonl"; t bench
    for kv in fp16 fp8 int8; do ctx 8b-int4 $kv 32768; done
    ctx 8b-int4 fp16 0
    t runs
    ;;
  probe)
    build decodebench decodebench_attention_bench
    for p in 32768 131000; do timeout 90 $b/decodebench_attention_bench --only 8b --positions $p --sweep --reps 10; done >"$out/attention_bench.jsonl" 2>&1
    cat "$out/attention_bench.jsonl"; t bench
    for p in 32768 131000; do
      timeout 120 ncu --clock-control none -k regex:attention_mma_kernel --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        --section SchedulerStats --section LaunchStats \
        $b/decodebench_attention_bench --only 8b --positions $p --reps 1 --layers 1 >"$out/ncu-$p.txt" 2>&1
      grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Issue Slots|Stall|Warp Cycles Per Issued|Registers|Block Limit|No Eligible" "$out/ncu-$p.txt" | head -30
    done
    t ncu
    for kv in fp16 fp8 int8; do ctx 8b-int4 $kv 32768; done
    ctx 8b-int4 fp16 0
    t runs
    ;;
esac
