#!/usr/bin/env bash
# The batched fp16 copies through L2 a block of rows at a time, on the H200. From the repository
# root on the GPU machine:  bash results/lab/batch-l2-2026-12-04/run.sh run1
# Predicted (before running, README.md): 8b-int4 B = 128 16.1 -> ~7.5 ms (6.5-9.5), B = 256
# 19.3 -> ~11 ms (10-13; 8b-fp16 9.95); 8b-int8 about int4 + 0.7 ms. A block the size of the
# whole matrix (DECODEBENCH_DEQUANT_CHUNK_MB=100000) is the copy through HBM with the new copy
# kernels: ~2-3 ms slower than 16 MiB if the blocks stay in L2.
# Kill: 8b-int4 at B = 128 above 10 ms, or its gpu tests failing after one fix, in two calls.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/batch-l2-2026-12-04/out}
mkdir -p "$out/runs"
b=build-gpu
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
export DB_GIT_COMMIT=$(git log -1 --format=%h 2>/dev/null || echo unknown)
bat() {  # model batch tag [env...]
  local m=$1 n=$2 tag=$3; shift 3
  env "$@" $b/decodebench --model $m --graph on --batch $n --tokens 16 --repeat 2 -o "$out/runs/$m-b$n-$tag.json" 2>&1 |
    grep -E "TPOT|rror|decodebench:" | sed "s/^/$m b$n $tag: /"
}
case "${1:?usage: run.sh run1}" in
  run1)
    { cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
      cmake --build $b -j16 --target decodebench decodebench_gpu_tests decodebench_attention_bench \
        decodebench_attention_trace decodebench_attention_trace12 decodebench_kv_accuracy; } >"$out/build.log" 2>&1 ||
      { grep -E "error" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
    t built
    timeout 200 $b/decodebench_gpu_tests --gtest_filter='DequantRows.*:GemmRowsDequant.*:Kernels/EngineBatch.*b65*:EngineBatchMemory.*:EngineBatchGraph.*:Prefill.*:Kernels/PrefillVsSteps.*' >"$out/gpu-l2.txt" 2>&1
    echo "gpu rc $?"; grep -E "FAILED|tests ran|PASSED" "$out/gpu-l2.txt" | head -20; t gpu
    for m in 8b-int4 8b-int8 8b-fp16; do for n in 128 256; do bat $m $n l2; done; done; t batch
    for n in 128 256; do bat 8b-int4 $n whole DECODEBENCH_DEQUANT_CHUNK_MB=100000; done
    for mb in 8 32; do bat 8b-int4 256 mb$mb DECODEBENCH_DEQUANT_CHUNK_MB=$mb; done; t chunks
    tar -C "$out" -czf "$out/runs.tar.gz" runs && rm -rf "$out/runs"
    ;;
esac
