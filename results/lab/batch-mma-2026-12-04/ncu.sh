#!/usr/bin/env bash
# Where the tensor-core GEMV (kernels/gemv_mma.cu, killed in batch.md §26) loses its time:
# ncu on one steady-state launch of 8b's gate/up at 2 sequences, int4 and fp16, cold L2.
# Needs a machine to itself for ~6 minutes: the bench alone took over 260 s to build (the
# library's kernels); on 2026-12-04 the device time ran out before it finished.
set -uo pipefail
cd "$(dirname "$0")/../../.."
if [ -d .debs ] && ! pkg-config --exists re2 2>/dev/null; then
  for f in .debs/*.deb; do dpkg -x "$f" /tmp/r; done
  export PKG_CONFIG_SYSROOT_DIR=/tmp/r PKG_CONFIG_PATH=/tmp/r/usr/lib/x86_64-linux-gnu/pkgconfig \
    LD_LIBRARY_PATH=/tmp/r/usr/lib/x86_64-linux-gnu
fi
out=${OUT:-results/lab/batch-mma-2026-12-04/ncu}
mkdir -p "$out"
b=build-gpu
T0=$(date +%s); t() { echo "[t=$(( $(date +%s) - T0 ))s] $*"; }
{ cmake -S . -B $b -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DDECODEBENCH_DEV=ON &&
  timeout 200 cmake --build $b -j16 --target decodebench_skinny_bench; } >"$out/build.log" 2>&1 || { tail -3 "$out/build.log"; t nobuild; exit 1; }
t built
for s in int4 fp16; do
  # launches of the kernel: qkv 44, o 44, then gate/up: skip 98 (its 11th).
  timeout 45 ncu --clock-control none -k regex:gemv_mma_kernel --launch-skip 98 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section SchedulerStats \
    --section ComputeWorkloadAnalysis --section LaunchStats \
    $b/decodebench_skinny_bench --batches 2 --$s 6144 4096 4096 4096 28672 4096 >"$out/ncu-$s.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Issue Slots|Stall|Warp Cycles Per Issued|Registers Per|Block Limit|No Eligible|Tensor|Pipe|Grid Size|Block Size" "$out/ncu-$s.txt" | head -40
  t "ncu $s"
done
